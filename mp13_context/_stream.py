# SPDX-License-Identifier: MIT
"""``EventStream``: the async iterator ``Cursor.astream`` returns, which stops its
exchange when it is closed *or* dropped.

The exchange runs as a task that puts its events on a queue; the stream yields
them. Closing the stream (``aclose``, ``contextlib.aclosing``, the end of an
``async with``) cancels the task and waits until the cancelled reply is recorded,
also when another task is iterating the stream (whose ``async for`` then ends).

A plain ``break`` out of ``async for`` closes nothing: Python only drops the
iterator. A bare async generator would then run on until asyncio's finalizer
closes it a loop turn later, and an ``aask`` on the same cursor right after the
``break`` would find the cursor busy. So the generator sits behind this wrapper:
when the last reference goes (at once, in CPython, on ``break``) its ``__del__``
asks the loop to cancel the task and tells the cursor, whose next ``aask`` /
``aretry`` / ``acontinue`` / ``abatch`` waits for the cancelled reply to be
recorded instead of refusing. A sync call cannot wait for it (it would block the
loop that records it), so until then it refuses with a ``CursorError`` that says
so. A stream the caller still holds keeps running until it is closed.

Invariant: the wrapper holds the generator and a ``_Run``; the generator holds
only the ``_Run``, never the wrapper, so no cycle delays ``__del__`` to the
cycle collector.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any

from mp13_context._events import Event, EventCallback
from mp13_context._model import Turn

Start = Callable[[EventCallback], Coroutine[Any, Any, Turn]]


class _Run:
    """The exchange task of one stream, once the first event is asked for."""

    def __init__(self, start: Start) -> None:
        self.start = start
        self.task: asyncio.Task[Turn] | None = None
        # ``aclose()`` was called: the cancellation it caused ends the events quietly.
        self.closed = False


async def _events(run: _Run) -> AsyncGenerator[Event, None]:
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    run.task = task = asyncio.ensure_future(run.start(queue.put))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        if not (run.closed and task.cancelled()):
            task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class EventStream(AsyncIterator[Event]):
    """Events of one exchange (see the module docstring); ``aclose()`` stops it."""

    def __init__(self, start: Start, on_dropped: Callable[[asyncio.Task[Turn]], None]) -> None:
        self._run = _Run(start)
        self._events = _events(self._run)
        self._on_dropped = on_dropped
        self._iterating = False  # an ``__anext__`` is waiting for the next event

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        self._iterating = True
        try:
            return await self._events.__anext__()
        finally:
            self._iterating = False

    async def aclose(self) -> None:
        """Stop the exchange (the reply is recorded as cancelled) and wait for it.

        Also from another task than the one iterating (a server whose client went away):
        the generator cannot be closed while that task waits in it, so the exchange is
        cancelled directly, and the iterating ``async for`` then ends after the events
        of the cancelled reply."""
        run = self._run
        run.closed = True
        task = run.task
        if self._iterating and task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return
        await self._events.aclose()

    def __del__(self) -> None:
        task = self._run.task
        if task is None or task.done():
            return
        # Maybe not on the loop's thread (a cycle collected elsewhere), hence threadsafe;
        # a closed loop has nothing left to cancel.
        with contextlib.suppress(RuntimeError):
            task.get_loop().call_soon_threadsafe(task.cancel)
            self._on_dropped(task)
