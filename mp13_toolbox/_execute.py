# SPDX-License-Identifier: MIT
"""Running one tool callable: timeouts, sync/async bridging, output text and its cap.

Invariants:

- A sync callable with a timeout runs on a fresh *daemon* worker thread. Python
  cannot kill a thread, so on timeout the thread is abandoned: it runs on in
  the background, its result is discarded, and (being a daemon) it never keeps
  the process from exiting. A tool that must stop on time should be ``async``
  (it is then cancelled by ``asyncio.wait_for``) or check a deadline itself.
- From ``aexecute`` a sync callable always runs on such a thread, so a slow
  tool never blocks the event loop; an async callable is awaited on the
  caller's loop under ``asyncio.wait_for``.
- From ``execute`` an async callable runs on its own event loop in a worker
  thread, so ``execute`` works whether or not the calling thread has a loop.
- A sync callable from ``execute`` with no timeout runs inline (no thread).
- Outputs: ``str`` as is; anything else JSON-encoded (attrs classes,
  dataclasses and enums through the package converter); text longer than the
  cap is cut and ends with ``… [truncated N chars]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from mp13_toolbox._convert import converter

TRUNCATION_MARKER = "… [truncated {n} chars]"


class ToolTimeout(Exception):  # an internal signal; never escapes the toolbox
    """The callable did not finish within its timeout."""


async def _await(value: Any, timeout: float | None) -> Any:
    return await asyncio.wait_for(value, timeout) if timeout is not None else await value


def _finish_in_thread(value: Any, timeout: float | None) -> Any:
    """A worker thread has no loop: drive an awaitable result on a private one."""
    if inspect.isawaitable(value):
        return asyncio.run(_await(value, timeout))
    return value


def _spawn(target: Callable[[], Any], timeout: float | None, done: Callable[[Any, Any], None]):
    ctx = contextvars.copy_context()

    def body() -> None:
        try:
            value = ctx.run(lambda: _finish_in_thread(target(), timeout))
        except BaseException as exc:  # report everything, incl. SystemExit from a tool
            done(None, exc)
        else:
            done(value, None)

    thread = threading.Thread(target=body, name="mp13-tool", daemon=True)
    thread.start()
    return thread


def call_blocking(target: Callable[[], Any], is_async: bool, timeout: float | None) -> Any:
    """Run ``target()`` (which returns a coroutine when ``is_async``) and return its value.

    Raises ``ToolTimeout`` on timeout, or whatever the callable raised.
    """
    if not is_async and timeout is None:
        value = target()
        if not inspect.isawaitable(value):
            return value
        return call_blocking(lambda: value, True, None)
    box: dict[str, Any] = {}
    finished = threading.Event()

    def done(value: Any, exc: Any) -> None:
        box["value"], box["exc"] = value, exc
        finished.set()

    _spawn(target, timeout, done)
    # The async path times out inside the thread (wait_for); the margin lets that
    # cancellation surface as the tool's own TimeoutError before we give up.
    grace = 0.5 if is_async else 0.0
    if not finished.wait(None if timeout is None else timeout + grace):
        raise ToolTimeout
    exc = box["exc"]
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) and is_async:
        raise ToolTimeout from exc
    if exc is not None:
        raise exc
    return box["value"]


async def call_async(target: Callable[[], Any], is_async: bool, timeout: float | None) -> Any:
    """Awaitable twin of ``call_blocking`` for use on an event loop."""
    if is_async:
        try:
            return await _await(target(), timeout)
        except asyncio.TimeoutError as exc:
            raise ToolTimeout from exc
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, exc: Any) -> None:
        if fut.done():  # cancelled or timed out: the result is discarded
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)

    def done(value: Any, exc: Any) -> None:
        # RuntimeError: the loop closed while the abandoned thread ran.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, exc)

    _spawn(target, timeout, done)
    try:
        return await asyncio.wait_for(fut, timeout) if timeout is not None else await fut
    except asyncio.TimeoutError as exc:
        raise ToolTimeout from exc


def _default(value: Any) -> Any:
    try:
        plain = converter.unstructure(value)
    except Exception:
        return str(value)
    if plain is value:
        return str(value)
    return plain


def output_text(value: Any) -> str:
    """The text a tool's return value becomes (see the module doc)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(converter.unstructure(value), ensure_ascii=False, default=_default)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def cap(text: str, max_chars: int | None) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` plus a visible marker; whether it was cut."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(n=len(text) - max_chars), True
