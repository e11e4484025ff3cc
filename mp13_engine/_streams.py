# SPDX-License-Identifier: Apache-2.0
"""Per-request runtime state and the stream iterators that read it.

``RequestState`` is the one mutable record of a request in flight. The worker
thread appends generated token ids (``push``) and resolves it exactly once
(``finish``); any thread may read its progress or ask to cancel it. Text is
decoded lazily on the consumer side (``ChunkMaker``), so the worker's per-step
hot path is a list append plus, only when someone streams, a wake-up.

Invariants:
- ``finish`` succeeds once; later calls are no-ops returning False, so the
  worker and a cancelling caller can race safely.
- Stream text deltas never contain a partial UTF-8 character, and text that
  could be the start of a stop string is held back until it is known not to be.
- Closing, abandoning (GC) or breaking out of a stream iterator cancels its
  request; so does cancelling the asyncio task awaiting ``astream``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from mp13_engine._types import Chunk, FinishReason, Request, Response


class RequestState:
    """Mutable state of one submitted request (shared by the worker and its consumers)."""

    __slots__ = (
        "_cond",
        "_listeners",
        "_lock",
        "adapter",
        "adapter_names",
        "batch_size",
        "cached_tokens",
        "cancel_requested",
        "done",
        "finish_t",
        "first_token_t",
        "future",
        "id",
        "max_new_tokens",
        "prompt_ids",
        "prompt_text",
        "request",
        "response",
        "sealed",
        "start_t",
        "submit_t",
        "tokens",
        "visible",
        "watched",
    )

    def __init__(self, request: Request, prompt_text: str | None, prompt_ids: list[int] | None):
        self.request = request
        self.id = request.id
        self.prompt_text = prompt_text
        self.prompt_ids = prompt_ids
        self.max_new_tokens = 0
        self.submit_t = time.perf_counter()
        self.start_t: float | None = None
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self.tokens: list[int] = []
        self.visible = 0  # how many of ``tokens`` streams may read (see push/commit)
        self.future: Future[Response] = Future()
        self.response: Response | None = None
        self.cancel_requested = False
        self.done = False
        self.sealed = False
        self.batch_size = 0
        self.cached_tokens = 0  # prompt tokens whose KV came from the prefix cache
        self.adapter: str | None = None  # the PEFT adapter name the row ran with
        self.adapter_names: tuple[str, ...] = ()  # the adapters it asked for (resolved)
        self.watched = False
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._listeners: list[Callable[[], None]] = []

    # ----- worker side (hot path: keep cheap)
    def push(self, token: int, commit: bool = True) -> None:
        """Append a token; ``commit=False`` keeps it invisible to streams until ``commit()``
        (used while checking stop strings, so a stream never shows text that the
        final response then cuts away)."""
        with self._lock:
            if self.sealed:  # the response was already built (e.g. cancelled): drop it
                return
            self.tokens.append(token)
            listeners = self._reveal_locked() if commit else ()
        for cb in listeners:
            cb()

    def commit(self) -> None:
        """Make every pushed token visible to streams."""
        with self._lock:
            listeners = () if self.sealed else self._reveal_locked()
        for cb in listeners:
            cb()

    def _reveal_locked(self) -> list[Callable[[], None]] | tuple[()]:
        """Show every token to streams (lock held); the listeners to call after unlocking."""
        self.visible = len(self.tokens)
        if not self.watched:
            return ()
        self._cond.notify_all()
        return self._listeners

    def seal(self) -> list[int]:
        """Freeze the token list (no more pushes) and return it; called before building
        the response so that the response and the streams agree on the tokens."""
        with self._lock:
            self.sealed = True
            return list(self.tokens)

    def finish(self, response: Response) -> bool:
        """Resolve the request once; returns False when it was already resolved."""
        with self._lock:
            if self.done:
                return False
            self.done = True
            self.response = response
            self.finish_t = time.perf_counter()
            self._cond.notify_all()
            listeners = self._listeners
        self.future.set_result(response)
        for cb in listeners:
            cb()
        return True

    # ----- consumer side
    def watch(self, listener: Callable[[], None] | None = None) -> None:
        with self._lock:
            if listener is not None:
                # copy-on-write: push() iterates the list outside the lock
                self._listeners = [*self._listeners, listener]
            self.watched = True

    def wait_progress(self, seen: int) -> tuple[int, bool]:
        """Block until more than ``seen`` tokens are visible or the request is done.

        Returns (tokens a stream may read, done); once done that is every token
        of the final response (the list is sealed then).
        """
        with self._cond:
            while self.visible <= seen and not self.done:
                self._cond.wait()
            return (len(self.tokens) if self.done else self.visible), self.done

    def progress(self) -> tuple[int, bool]:
        with self._lock:
            return (len(self.tokens) if self.done else self.visible), self.done


class IncrementalDecoder:
    """Detokenizes a growing id list into text deltas without partial characters."""

    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self._prefix = 0
        self._read = 0

    def feed(self, ids: list[int]) -> str:
        if len(ids) <= self._read:
            return ""
        prefix_text = self._decode(ids[self._prefix : self._read])
        new_text = self._decode(ids[self._prefix :])
        # A trailing U+FFFD means the last token ends inside a multi-byte character: wait.
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text) :]
            self._prefix, self._read = self._read, len(ids)
            return delta
        return ""


class ChunkMaker:
    """Turns a request's progress into ``Chunk`` values (consumer side, any thread).

    ``events`` (optional) wraps a tool-call stream parser: ``feed(raw_delta)``
    and ``close()`` return chunks (content, reasoning, completed tool calls).
    Without it, chunk text is the raw decoded text.
    """

    def __init__(
        self,
        state: RequestState,
        decode: Callable[[list[int]], str],
        events: Any = None,
    ):
        self._state = state
        self._decoder = IncrementalDecoder(decode)
        self._hold = max((len(s) for s in state.request.stop), default=1) - 1
        self._pending = ""  # decoded raw text not yet released (may start a stop string)
        self._released = ""  # raw text already passed on
        self._events = events  # optional: feed(text) -> list[Chunk], close() -> list[Chunk]
        self._emitted = ""  # chunk text already emitted (content)
        self.seen = 0
        self.finished = False

    def make(self, n_tokens: int, done: bool) -> list[Chunk]:
        st = self._state
        out: list[Chunk] = []
        if n_tokens > self.seen:
            self._pending += self._decoder.feed(st.tokens[:n_tokens])
            self.seen = n_tokens
        if not done:
            cut = len(self._pending) - self._hold
            if cut > 0:
                out.extend(self._release(self._pending[:cut]))
                self._pending = self._pending[cut:]
            return out
        response = st.response
        assert response is not None
        raw = response.raw_text
        if raw.startswith(self._released):
            out.extend(self._release(raw[len(self._released) :]))
        self._pending = ""
        if self._events is not None:
            out.extend(self._count(self._events.close()))
        final_text = response.text
        rest = final_text[len(self._emitted) :] if final_text.startswith(self._emitted) else ""
        out.append(Chunk(id=st.id, text=rest, done=True, response=response))
        self.finished = True
        return out

    def _release(self, text: str) -> list[Chunk]:
        if not text:
            return []
        self._released += text
        if self._events is not None:
            return self._count(self._events.feed(text))
        return self._count([Chunk(id=self._state.id, text=text)])

    def _count(self, chunks: list[Chunk]) -> list[Chunk]:
        for c in chunks:
            self._emitted += c.text
        return chunks


class RequestStream:
    """Sync iterator of ``Chunk`` for one request (``engine.stream``).

    Closing it (``close()``, leaving a ``with`` block, ``break`` followed by GC)
    before the last chunk cancels the request.
    """

    def __init__(self, state: RequestState, maker: ChunkMaker, cancel: Callable[[str], Any]):
        self._state = state
        self._maker = maker
        self._cancel = cancel
        self._queue: collections.deque[Chunk] = collections.deque()
        self._closed = False
        state.watch()

    @property
    def id(self) -> str:
        return self._state.id

    @property
    def response(self) -> Response | None:
        """The final response once the request finished, else None."""
        return self._state.response

    def result(self, timeout: float | None = None) -> Response:
        """Block until the request ends (e.g. after ``close``) and return its response."""
        return self._state.future.result(timeout)

    def __iter__(self) -> RequestStream:
        return self

    def __next__(self) -> Chunk:
        while not self._queue:
            if self._maker.finished or self._closed:
                raise StopIteration
            try:
                n, done = self._state.wait_progress(self._maker.seen)
            except BaseException:
                self.close()
                raise
            self._queue.extend(self._maker.make(n, done))
        return self._queue.popleft()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._state.done:
                self._cancel(self._state.id)

    def __enter__(self) -> RequestStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Abandoning an unfinished stream cancels its request (brief: GC cancels).
        with contextlib.suppress(Exception):
            self.close()


class AsyncRequestStream:
    """Async iterator of ``Chunk`` for one request (``engine.astream``).

    Cancelling the task that iterates it, ``aclose()``, or abandoning it
    before the last chunk cancels the request.
    """

    def __init__(self, state: RequestState, maker: ChunkMaker, cancel: Callable[[str], Any]):
        self._state = state
        self._maker = maker
        self._cancel = cancel
        self._queue: collections.deque[Chunk] = collections.deque()
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._scheduled = False
        self._sched_lock = threading.Lock()
        # The state must not keep this stream alive (abandoning it cancels via __del__).
        ref = weakref.ref(self)

        def listener() -> None:
            stream = ref()
            if stream is not None:
                stream._notify()

        state.watch(listener)

    def _notify(self) -> None:
        # Called from the worker thread: coalesce wake-ups into one loop callback.
        with self._sched_lock:
            if self._scheduled:
                return
            self._scheduled = True
        # A closed loop raises RuntimeError: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        with self._sched_lock:
            self._scheduled = False
        self._event.set()

    @property
    def id(self) -> str:
        return self._state.id

    @property
    def response(self) -> Response | None:
        return self._state.response

    async def result(self) -> Response:
        """Wait until the request ends (e.g. after ``aclose``) and return its response."""
        return await asyncio.wrap_future(self._state.future)

    def __aiter__(self) -> AsyncRequestStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            while not self._queue:
                if self._maker.finished or self._closed:
                    raise StopAsyncIteration
                self._event.clear()
                n, done = self._state.progress()
                if n <= self._maker.seen and not done:
                    await self._event.wait()
                    continue
                self._queue.extend(self._maker.make(n, done))
        except asyncio.CancelledError:
            self._close_sync()
            raise
        return self._queue.popleft()

    def _close_sync(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._state.done:
                self._cancel(self._state.id)

    async def aclose(self) -> None:
        self._close_sync()

    async def __aenter__(self) -> AsyncRequestStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._close_sync()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close_sync()


def cancelled_response(state: RequestState, text: str = "") -> Response:
    """A CANCELLED response for a request that never ran (or kept no text)."""
    return Response(id=state.id, text=text, raw_text=text, finish_reason=FinishReason.CANCELLED)
