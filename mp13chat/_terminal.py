# SPDX-License-Identifier: MIT
"""The terminal: whether a stream is one (``is_terminal``, the one check the REPL, the
one-shot answer and ``no_echo`` share), and keeping its own echo out of what the REPL
draws while a task runs.

While a reply streams, prompt-toolkit is not reading, so the terminal is in its normal
(cooked) mode and echoes what is typed: Ctrl+C shows as ``^C``, typed-ahead text as
itself. Written into the live markdown area, that echo shifts the lines under rich's
feet (``^C`` after a full-width line wraps onto a new one), so the area's erase misses
a line and the reply's first line stays on screen twice. ``no_echo(stream)`` turns
echo off on a terminal for the duration of a block and restores the exact previous
settings afterwards; typed-ahead text is not lost (the next prompt reads it). On
anything that is not a terminal (pipes, tests, Windows) it does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import IO, Any


@contextlib.contextmanager
def no_echo(stream: IO[Any] | None) -> Iterator[bool]:
    """Echo off on ``stream`` (a terminal) inside the block; yields whether it changed."""
    try:
        import termios
    except ImportError:  # pragma: no cover - not on this platform
        yield False
        return
    if stream is None or not is_terminal(stream):
        yield False
        return
    try:
        fd = stream.fileno()
        saved = termios.tcgetattr(fd)
    except (AttributeError, OSError, ValueError, termios.error):  # no descriptor, or no tty's
        yield False
        return
    quiet = list(saved)
    quiet[3] = saved[3] & ~(termios.ECHO | getattr(termios, "ECHOCTL", 0))  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield True
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


def is_terminal(stream: IO[Any]) -> bool:
    """Whether ``stream`` is a terminal (not a pipe, a file, or a closed stream)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):  # a closed or unusual stream: no terminal
        return False
