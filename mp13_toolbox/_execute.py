# SPDX-License-Identifier: MIT
"""Running one tool callable: threads, event loops, timeouts, output text and its cap.

Invariants:

- A tool runs on its own fresh *daemon* thread: always from ``aexecute``, and
  from ``execute`` whenever it has a timeout or is async. An ``async`` tool gets
  its own event loop on that thread, never the caller's, so a tool that blocks
  (``time.sleep`` in an ``async def``) cannot stall the caller's loop and its
  timeout still holds. The price: an async tool must not use objects bound to
  the caller's loop (futures, queues, clients opened there); pass it data, or
  make it a sync tool.
- Python cannot kill a thread: on timeout the thread is abandoned, runs on in
  the background, its result is discarded, and (being a daemon) it never keeps
  the process from exiting. ``Outcome.still_running`` says so, and the error
  result tells the model the tool may still finish its work. An async tool is
  also cancelled at its next ``await`` and gets ``CANCEL_GRACE_S`` to finish its
  cleanup before the toolbox returns. A tool that must stop on time should be
  ``async`` or check a deadline itself.
- A sync tool from ``execute`` with no timeout runs inline (no thread).
- **Everything a tool raises is its outcome, never the caller's exception**:
  ``Exception``, ``SystemExit`` (argparse on bad arguments), ``GeneratorExit``,
  its own ``CancelledError``, and a ``KeyboardInterrupt`` it raises on its
  worker thread (signals never reach those threads, so it can only be the
  tool's own). Two things propagate, because they are the caller's and not the
  tool's: the cancellation of the awaiting task (``aexecute``; the tool's own
  ``CancelledError`` arrives as a value, so the two cannot be confused), and a
  ``KeyboardInterrupt`` on the calling thread (the user's Ctrl+C while an
  inline tool ran or while ``execute`` waited), which must stay able to stop a
  program.
- Outputs: ``str`` as is; anything else JSON-encoded (attrs classes,
  dataclasses and enums through the package converter, sets as sorted arrays,
  NaN and infinities as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``,
  what JSON cannot hold as its text), as strict JSON; a value that cannot be
  encoded at all (cyclic, too deep) is its ``str``. Text longer than the cap is
  cut and ends with ``… [truncated N chars]``. The value becomes text on the
  tool's own thread, within its timeout (``Render``), and a value whose
  ``__str__`` or ``__repr__`` raises, whatever it raises, still gives a text.
- Where a failure happened is kept for people, never for the model:
  ``failure_traceback`` is the traceback text of what a tool raised, without the
  toolbox's own frames above the tool, and ``Outcome.where`` is the stack of a
  tool given up on at its timeout, read just before it was cancelled (``None``
  when it could not be read). Both are capped at ``MAX_TRACEBACK_CHARS`` and
  never raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import math
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable
from typing import Any

import attrs

from mp13_toolbox._convert import converter

TRUNCATION_MARKER = "… [truncated {n} chars]"

#: The longest traceback text kept (a deep recursion's can be far longer): its head and
#: its tail, where the first and the last frames are, with a marker between them.
MAX_TRACEBACK_CHARS = 20_000
_TRACEBACK_HEAD = 4_000
_TRACEBACK_CUT = "\n… [{n} chars of traceback left out] …\n"

#: Seconds a cancelled or timed-out async tool gets to run its cleanup before the
#: toolbox returns (a tool that ignores cancellation is abandoned after this).
CANCEL_GRACE_S = 0.25


@attrs.frozen
class Outcome:
    """What running a tool gave: its return value, what it raised, or nothing in time."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False  # it did not finish within its timeout; it was abandoned
    # Timed out and still running when given up on: a sync tool (it cannot be stopped)
    # or an async one that ignored its cancellation for CANCEL_GRACE_S.
    still_running: bool = False
    # Timed out: the tool's stack when it was given up on (traceback text), if readable.
    where: str | None = None

    def unwrap(self) -> Any:
        """The value, or raise the error (for callables that are not tools: approvers,
        which run without a timeout, so there is no timed-out outcome to unwrap)."""
        if self.error is not None:
            raise self.error
        return self.value


#: Turns a finished run's outcome into what the caller needs (for a tool: its result
#: text). It runs on the tool's own thread, inside the timeout: rendering a value is the
#: tool's work too (a ``__str__`` that does I/O, a huge structure to JSON-encode), so it
#: must neither outlast the timeout nor block the caller's event loop.
Render = Callable[[Outcome], Outcome]


class ToolRun:
    """One callable on its own daemon thread; a coroutine gets its own event loop there.

    ``report(outcome)`` is called on that thread when the callable is done, with the
    outcome passed through ``render`` first when one is given (see ``Render``).
    ``cancel()`` cancels a coroutine at its next ``await`` (even before it started);
    a sync callable cannot be stopped and is abandoned.
    """

    def __init__(
        self,
        target: Callable[[], Any],
        report: Callable[[Outcome], None],
        render: Render | None = None,
    ) -> None:
        self._target = target
        self._report = report
        self._render = render
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[Any] | None = None
        self._cancelled = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        ctx = contextvars.copy_context()
        thread = threading.Thread(target=ctx.run, args=(self._body,), name="mp13-tool", daemon=True)
        self._thread = thread
        thread.start()

    def stack(self) -> str | None:
        """Where the callable is now, as traceback text (most recent call last): the
        coroutine's await chain, else its thread's frames below this module's; ``None``
        when it is not running or that cannot be read. Never raises."""
        try:
            with self._lock:
                task = self._task
            if task is not None and not task.done():
                summary = traceback.StackSummary.extract(_await_chain(task))
            else:
                thread = self._thread
                frame = sys._current_frames().get(thread.ident or -1) if thread else None
                if frame is None:
                    return None
                summary = traceback.extract_stack(frame)
                # Drop the thread's start-up and this module's frames above the tool.
                while summary and _own_file(summary[0].filename):
                    summary.pop(0)
            if not summary:
                return None
            text = "Traceback (most recent call last):\n" + "".join(summary.format())
            return _capped(text)
        except Exception:  # reading another thread's frames is best effort
            return None

    def _body(self) -> None:
        try:
            value = self._target()
            if inspect.isawaitable(value):
                value = asyncio.run(self._drive(value))
        except BaseException as exc:  # everything a tool raises is its outcome (module doc)
            outcome = Outcome(error=exc)
        else:
            outcome = Outcome(value=value)
        if self._render is not None:
            try:
                outcome = self._render(outcome)
            except BaseException as exc:  # on this thread, even a KeyboardInterrupt is the value's
                outcome = Outcome(error=exc)
        self._report(outcome)

    async def _drive(self, awaitable: Any) -> Any:
        task = asyncio.ensure_future(awaitable)
        with self._lock:
            self._loop, self._task = asyncio.get_running_loop(), task
            if self._cancelled:
                task.cancel()
        return await task

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed: it is done already
                loop.call_soon_threadsafe(task.cancel)


def _inline(target: Callable[[], Any]) -> Outcome:
    """Run a sync callable on this thread (an awaitable it returns is the value)."""
    try:
        return Outcome(value=target())
    except KeyboardInterrupt:  # the user's Ctrl+C on the calling thread (module doc)
        raise
    except BaseException as exc:
        return Outcome(error=exc)


def call_blocking(
    target: Callable[[], Any],
    is_async: bool,
    timeout: float | None,
    render: Render | None = None,
) -> Outcome:
    """Run ``target()`` (a coroutine function when ``is_async``) and wait for its outcome,
    passed through ``render`` where the tool ran (see ``Render``).

    ``Outcome.timed_out`` when it did not finish within ``timeout`` seconds.
    """
    if not is_async and timeout is None:
        outcome = _inline(target)
        if outcome.error is not None or not inspect.isawaitable(outcome.value):
            # Inline, as the tool ran: no timeout, and a Ctrl+C here is the user's.
            return outcome if render is None else render(outcome)
        # A sync-registered callable returned an awaitable: drive it on a thread.
        pending = outcome.value
        target, is_async = (lambda: pending), True
    done: list[Outcome] = []
    finished = threading.Event()

    def report(outcome: Outcome) -> None:
        done.append(outcome)
        finished.set()

    run = ToolRun(target, report, render)
    try:
        run.start()  # inside: a Ctrl+C while the thread starts must stop the tool too
        if not finished.wait(timeout):
            where = run.stack()  # before the cancel moves it
            run.cancel()
            if is_async:
                finished.wait(CANCEL_GRACE_S)
            return Outcome(timed_out=True, still_running=not finished.is_set(), where=where)
    except KeyboardInterrupt:  # the caller gave up waiting: stop the tool too
        run.cancel()
        raise
    return done[0]


async def call_async(
    target: Callable[[], Any], timeout: float | None, render: Render | None = None
) -> Outcome:
    """Run ``target()`` (sync or a coroutine function) off the loop; await its outcome,
    passed through ``render`` on the tool's thread (see ``Render``).

    ``Outcome.timed_out`` on timeout; the cancellation of the awaiting task
    propagates (and cancels an async tool).
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Outcome] = loop.create_future()

    def report(outcome: Outcome) -> None:
        # RuntimeError: the caller's loop closed while the abandoned thread ran. ``fut``
        # is never done before: a run reports once, and ``shield`` keeps it uncancelled.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fut.set_result, outcome)

    run = ToolRun(target, report, render)
    run.start()
    try:
        # The future only ever holds an Outcome, so a CancelledError here is the
        # awaiting task's own cancellation, never the tool's.
        return await asyncio.wait_for(asyncio.shield(fut), timeout)
    except asyncio.TimeoutError:
        where = run.stack()  # before the cancel moves it
        run.cancel()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), CANCEL_GRACE_S)
        return Outcome(timed_out=True, still_running=not fut.done(), where=where)
    except BaseException:
        run.cancel()
        raise


def _json_fallback(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        # JSON has no sets: an array, sorted so that the same set gives the same text in
        # every process (string hashing, hence set order, changes between runs).
        try:
            return sorted(value)
        except TypeError:  # mixed kinds (1 and "a") do not compare
            return sorted(value, key=repr)
    try:
        plain = converter.unstructure(value)
    except KeyboardInterrupt:
        raise
    except BaseException:
        return printable(value)
    if plain is value:
        return printable(value)
    return _finite(plain)


def _finite(value: Any) -> Any:
    """``value`` with NaN and the infinities as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``: JSON has no such numbers (Python writes them bare, which a strict
    parser, a browser's ``JSON.parse`` say, refuses), and ``null`` would lose them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def printable(value: object) -> str:
    """``str(value)``, else its ``repr``, else a placeholder: never raises.

    What a tool returns or raises is arbitrary: an int of 5,000 digits, a structure
    nested past the recursion limit or an object whose ``__str__`` fails must still
    give the model a result to read.
    """
    # str() and repr() return a str or raise (a __str__ returning another type is a
    # TypeError), so the first one that does not raise is the text.
    for show in (str, repr):
        try:
            return show(value)
        except KeyboardInterrupt:  # may be the user's Ctrl+C (an inline tool's value)
            raise
        except BaseException:  # SystemExit from a __str__ too: it is the value's, not ours
            continue
    return f"<a {type(value).__name__} that cannot be shown as text>"


def output_text(value: object) -> str:
    """The text a tool's return value becomes (see the module doc); never raises."""
    if isinstance(value, str):
        return value
    try:
        plain = converter.unstructure(value)
        try:
            return _dumps(plain)
        except ValueError:  # NaN or an infinity: strict JSON has no text for them
            return _dumps(_finite(plain))
    except KeyboardInterrupt:
        raise
    except BaseException:  # not JSON-able (too deep, an int too long to print, a failing hook)
        return printable(value)


def _dumps(plain: Any) -> str:
    return json.dumps(plain, ensure_ascii=False, allow_nan=False, default=_json_fallback)


def cap(text: str, max_chars: int | None) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` plus a visible marker; whether it was cut."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(n=len(text) - max_chars), True


def _await_chain(task: asyncio.Future[Any]) -> list[tuple[types.FrameType, int]]:
    """The frames of a suspended task's coroutine and of each coroutine it awaits, down
    to the innermost (``Task.get_stack`` gives only the outermost before Python 3.12),
    without asyncio's own."""
    frames = []
    awaited: Any = task.get_coro() if isinstance(task, asyncio.Task) else None
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        if not _own_file(frame.f_code.co_filename):
            frames.append((frame, frame.f_lineno))
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames


def failure_traceback(exc: BaseException) -> str:
    """The traceback text of what a tool (or an approver) raised, from the first frame
    outside this package's running code (``toolbox`` frames above the tool say nothing
    about the tool), capped (``MAX_TRACEBACK_CHARS``). Never raises: an exception whose
    traceback cannot be formatted gets a line that says so."""
    try:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None and _own_frame(tb):
            tb = tb.tb_next
        return _capped("".join(traceback.format_exception(type(exc), exc, tb)))
    except KeyboardInterrupt:
        raise
    except BaseException:  # a broken exception object (its __cause__ a non-exception ...)
        return f"{type(exc).__name__} (its traceback could not be formatted)\n"


def _own_frame(tb: types.TracebackType) -> bool:
    return _own_file(tb.tb_frame.f_code.co_filename)


def _capped(text: str) -> str:
    """``text`` within ``MAX_TRACEBACK_CHARS``: its head and tail around a marker."""
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    tail = MAX_TRACEBACK_CHARS - _TRACEBACK_HEAD
    cut = _TRACEBACK_CUT.format(n=len(text) - MAX_TRACEBACK_CHARS)
    return text[:_TRACEBACK_HEAD] + cut + text[-tail:]


# Frames of these files above a tool's own are the toolbox running it: the thread's
# start, ``ToolRun._body`` and the event loop it runs a coroutine on, the pipeline's
# call of the handler.
_OWN_FILES = frozenset(
    {
        __file__,
        os.path.join(os.path.dirname(__file__), "_pipeline.py"),
        threading.__file__,
    }
)
_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep


def _own_file(filename: str) -> bool:
    return filename in _OWN_FILES or filename.startswith(_ASYNCIO_DIR)
