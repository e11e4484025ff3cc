# SPDX-License-Identifier: MIT
"""The foreground task: one input line's work, which Ctrl+C cancels.

``Foreground.run(work)`` runs ``work`` as the one foreground task. While it runs, a
SIGINT handler (Ctrl+C) cancels just that task; the terminal is not in raw mode then,
so its echo is switched off (``_terminal``). A task cancelled that way returns ``None``
after calling ``on_cancel`` (the app prints one "cancelled" line), unless the task
already told the user (``reported``); a task cancelled from outside propagates the
cancellation. Any other exception goes to ``on_error`` (the app prints it as one line
and keeps its traceback for ``/error``) and gives ``None``; ``QuitRequested`` passes
through. No state outside the object: several can coexist.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import IO, Any, TypeVar

from mp13chat._repl import QuitRequested
from mp13chat._terminal import no_echo

T = TypeVar("T")


class Foreground:
    """Runs one task at a time in the foreground (see the module docstring)."""

    def __init__(
        self,
        *,
        on_error: Callable[[Exception], None],
        on_cancel: Callable[[], None],
        stdin: IO[Any] | None,
    ) -> None:
        self.on_error = on_error
        self.on_cancel = on_cancel
        self.stdin = stdin  # a real terminal echoes typed keys while a task runs
        self._task: asyncio.Task[Any] | None = None
        self._interrupted = False  # cancelled by Ctrl+C
        self._reported = False  # the task said itself that it was cancelled

    async def run(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or ``None`` when it was cancelled by Ctrl+C or failed."""
        task = asyncio.ensure_future(work)
        self._task = task
        self._interrupted = self._reported = False
        loop = asyncio.get_running_loop()
        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, self.cancel)
            installed = True
        try:
            with no_echo(self.stdin):
                return await task
        except QuitRequested:
            raise
        except asyncio.CancelledError:
            if not self._interrupted:  # cancelled from outside, not by Ctrl+C: propagate
                raise
            if not self._reported:
                self.on_cancel()
            return None
        except Exception as exc:
            self.on_error(exc)
            return None
        finally:
            self._task = None
            if installed:
                # Also restores Python's default handler (Ctrl+C = KeyboardInterrupt).
                loop.remove_signal_handler(signal.SIGINT)

    def reported(self) -> None:
        """The task has told the user it was cancelled (e.g. a reply's footer)."""
        self._reported = True

    def cancel(self) -> bool:
        """Cancel the running task (what Ctrl+C does); True if there was one."""
        task = self._task
        if task is None or task.done():
            return False
        self._interrupted = True
        task.cancel()
        return True
