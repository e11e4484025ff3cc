# SPDX-License-Identifier: Apache-2.0
"""How a training job reports progress: its event log, and the log lines of tokenizing.

Concept
    ``EventLog`` holds every ``TrainingEvent`` a job emitted, in order, for any number of
    consumers (``TrainingJob.events`` / ``aevents``): each sees every event from the first.
    ``RenderProgress`` covers the time before any event can: ``engine.train`` returns only
    once every row is tokenized, so it logs (``mp13_engine.training``) how far that is.

Invariants
    * Events are only appended; once ``close``d (the job ended) the log takes no more, and
      a consumer's iteration ends after the last event.
    * Waiting blocks a thread (``events``) or awaits a loop future that the emitting thread
      resolves through ``call_soon_threadsafe`` (``aevents``): no polling, no thread per
      waiter; an awaiter's future is dropped at the next event, so cancelling it never
      touches the job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

from mp13_engine._streams import call_soon, wake
from mp13_engine._training._config import TrainingEvent

_log = logging.getLogger("mp13_engine.training")


class EventLog:
    """A job's events, with the thread and loop waiters of their consumers."""

    def __init__(self) -> None:
        self._events: list[TrainingEvent] = []
        self._cond = threading.Condition()
        self._closed = False
        # Loop futures of aevents() awaiters, woken (and dropped) at the next event.
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def events(self, timeout: float | None, where: Callable[[], str]) -> Iterator[TrainingEvent]:
        """Every event from the first; ``TimeoutError`` when none comes within ``timeout`` s
        (``where()`` says why the job may be slow)."""
        i = 0
        while True:
            with self._cond:
                if not self._cond.wait_for(functools.partial(self._has_news, i), timeout):
                    raise TimeoutError(
                        f"no training event within {timeout} s; the job goes on ({where()})"
                    )
                new, closed = self._events[i:], self._closed
            yield from new
            i += len(new)
            if closed and i >= len(self._events):
                return

    async def aevents(self) -> AsyncIterator[TrainingEvent]:
        """Async twin of :meth:`events`: awaits each event without blocking the loop."""
        loop = asyncio.get_running_loop()
        i = 0
        while True:
            waiter: asyncio.Future[None] | None = None
            with self._cond:
                new, closed = self._events[i:], self._closed
                if not new and not closed:
                    waiter = loop.create_future()
                    self._async_waiters.append((loop, waiter))
            if waiter is not None:
                await waiter
                continue
            for event in new:
                yield event
            i += len(new)
            if closed and i >= len(self._events):
                return

    def _has_news(self, seen: int) -> bool:
        return len(self._events) > seen or self._closed

    def append(self, event: TrainingEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._notify()

    def _notify(self) -> None:
        """Wake every waiter (call holding ``_cond``)."""
        self._cond.notify_all()
        waiters, self._async_waiters = self._async_waiters, []
        for loop, waiter in waiters:
            call_soon(loop, wake, waiter)


class RenderProgress:
    """Logs (``mp13_engine.training``, INFO) how far ``engine.train`` is in tokenizing the
    data, every ``every_s`` seconds: it returns only once every row is rendered, and on a
    large dataset that takes minutes, before any event can say anything."""

    every_s = 10.0

    def __init__(self, adapter: str, total: int) -> None:
        self.adapter, self.total = adapter, total
        self.count = 0
        self.start = self.last = time.perf_counter()

    def tick(self) -> None:
        self.count += 1
        now = time.perf_counter()
        if now - self.last < self.every_s:
            return
        self.last = now
        left = (now - self.start) / self.count * (self.total - self.count)
        _log.info(
            "training %r: tokenized %d of %d rows (%.0f%%), about %.0f s left",
            self.adapter,
            self.count,
            self.total,
            100 * self.count / self.total,
            left,
        )

    def done(self, truncated: int, dropped: int) -> None:
        """The summary; a WARNING when rows were cut or left out (the result counts them too,
        but only once the job ends)."""
        _log.log(
            logging.WARNING if truncated or dropped else logging.INFO,
            "training %r: tokenized %d rows in %.1f s; %d cut to max_seq_len, %d left out "
            '(too long with overflow="drop", or no token to learn within max_seq_len)%s',
            self.adapter,
            self.total,
            time.perf_counter() - self.start,
            truncated,
            dropped,
            "; raise max_seq_len to keep them whole" if truncated or dropped else "",
        )
