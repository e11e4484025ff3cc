# SPDX-License-Identifier: MIT
"""Keeping the terminal's own echo out of what the REPL draws while a task runs.

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
    fd = _terminal_fd(stream)
    if fd is None:
        yield False
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
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


def _terminal_fd(stream: IO[Any] | None) -> int | None:
    if stream is None:
        return None
    try:
        fd = stream.fileno()
        return fd if stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None
