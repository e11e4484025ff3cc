# SPDX-License-Identifier: Apache-2.0
"""Per-request runtime state, and the stream iterators that only read it.

``RequestState`` is the one mutable record of a request in flight. Its
``status`` (``_output.RequestStatus``) only increases; its output processor
(``_output.OutputProcessor``) turns tokens into text, reasoning and tool calls
on the worker thread, and the chunks it produces (queued only when someone
streams the request) and the final ``Response`` come from that one state.

The contract with the decode loop (worker thread):

- ``start() -> bool``: the row is admitted (``RUNNING``). False when the
  request was cancelled (it is resolved ``CANCELLED`` then) or already
  finished: leave the row out.
- ``append(token) -> bool``: per generated token, EOS excluded (the loop
  detects EOS). True when the row must end now: a stop string completed, or a
  cancel is pending; the loop then calls ``finish(FinishReason.STOP)`` (a
  pending cancel makes that ``CANCELLED``). Also True for a state that was
  already resolved (e.g. by ``close``): end the row.
- ``finish(reason, error=None) -> bool``: resolve once; later calls are no-ops
  returning False. Any thread may call it: the loop for rows that end, the
  canceller for a request it took out of the queue, ``close`` for leftovers.
- ``status``: a loop that wants to drop a cancelled row before computing its
  step (to free its cache at once) checks ``status is RequestStatus.CANCELLING``
  and calls ``finish(FinishReason.CANCELLED)``.

The loop sets ``batch_size``, ``cached_tokens``, ``adapter`` and
``adapter_names`` (they go into the metrics) and reads ``prompt_ids`` and
``max_new_tokens`` (LENGTH is the loop's decision, as EOS is).

Other threads: ``cancel()`` asks to cancel (``CANCELLING``); ``Engine.cancel``
then resolves the request itself, and the loop drops the row at its next step.
A ``cancel()`` alone (a cancelled future of a state the engine did not queue; the
engine's own states route a cancelled future through ``Engine.cancel``) is resolved
by the loop at its next step, within one step. Every method is
lock-protected, so cancel, close and the worker can race safely: a request
resolves exactly once, with the text produced until it ended. Once a cancel
was asked (``cancel()`` returned True), the request ends ``CANCELLED`` unless
it fails (``ERROR``).

Streams: ``RequestStream`` blocks on the state's condition and
``AsyncRequestStream`` is woken through ``call_soon_threadsafe`` on the loop
that iterates it, which need not be the one that made it (no polling);
neither decodes nor parses. Closing, abandoning (GC) or breaking out of a
stream before its last chunk cancels its request; so does cancelling the
asyncio task awaiting ``astream``.
``call_soon`` and ``wait_one_way`` carry worker results to event loops (also for
``agenerate`` and ``TrainingJob``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

from mp13_engine._config import is_number
from mp13_engine._errors import RequestError
from mp13_engine._output import Output, OutputProcessor, OutputSetup, RequestStatus, not_ours
from mp13_engine._types import (
    Chunk,
    FinishReason,
    Request,
    RequestMetrics,
    Response,
    TokenLogprob,
)
from mp13_toolbox import Mp13Error

_log = logging.getLogger(__name__)

_RUNNING = RequestStatus.RUNNING
_CANCELLING = RequestStatus.CANCELLING
_T = TypeVar("_T")


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` on ``loop`` (from any thread); nothing when the loop has closed."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
        loop.call_soon_threadsafe(fn, *args)


def wake(waiter: asyncio.Future[None]) -> None:
    """Resolve ``waiter`` (on its loop) unless its awaiting task was cancelled meanwhile."""
    if not waiter.done():
        waiter.set_result(None)


def wait_timeout(timeout: object, error: type[Mp13Error], call: str) -> float | None:
    """``timeout`` of a blocking wait (``None``: no limit, or seconds >= 0), else ``error``."""
    if timeout is None:
        return None
    if is_number(timeout) and timeout >= 0:
        return timeout
    raise error(
        f"{call}(timeout={timeout!r:.40}) is not allowed; use a number of seconds >= 0, "
        "or None to wait without a limit"
    )


async def wait_one_way(future: Future[_T]) -> _T:
    """``future``'s outcome, awaited in the running loop through a loop future of its own.

    One way only: cancelling the awaiting task leaves ``future`` alone
    (``asyncio.wrap_future`` chains both ways and would cancel it for everyone).
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    future.add_done_callback(lambda _: call_soon(loop, wake, waiter))
    await waiter
    return future.result()


class RequestState:
    """Mutable state of one submitted request (see the module docstring for the threads)."""

    __slots__ = (
        "_chunks",
        "_cond",
        "_listeners",
        "_lock",
        "_out",
        "_setup",
        "_stops",
        "adapter",
        "adapter_names",
        "batch_size",
        "cached_tokens",
        "first_token_t",
        "future",
        "id",
        "logprobs",
        "max_new_tokens",
        "prompt_ids",
        "prompt_text",
        "request",
        "response",
        "start_t",
        "status",
        "submit_t",
        "tokens",
        "watched",
    )

    def __init__(
        self,
        request: Request,
        prompt_text: str | None = None,
        prompt_ids: list[int] | None = None,
        *,
        output: OutputSetup | None = None,
        watched: bool = False,
    ):
        """``output``: the engine's processor setup (without one, only token ids are kept);
        ``watched``: someone will stream it, so chunks are queued from the first token."""
        self.request = request
        self.id = request.id
        self.prompt_text = prompt_text
        self.prompt_ids = prompt_ids
        self.max_new_tokens = 0
        self.status = RequestStatus.WAITING
        self.submit_t = time.perf_counter()
        self.start_t: float | None = None
        self.first_token_t: float | None = None
        self.tokens: list[int] = []  # generated ids (EOS excluded)
        # each with its log-probability, only when the request asks (Request.logprobs)
        self.logprobs: list[TokenLogprob] | None = [] if request.logprobs else None
        self.future: Future[Response] = Future()
        # Cancelling the future cancels the request (the worker resolves it at its next step).
        self.future.add_done_callback(self._future_done)
        self.response: Response | None = None
        self.batch_size = 0
        self.cached_tokens = 0  # prompt tokens whose KV came from the prefix cache
        self.adapter: str | None = None  # the PEFT adapter name the row ran with
        self.adapter_names: tuple[str, ...] = ()  # the adapters it asked for (resolved)
        self.watched = watched
        self._setup = output
        # Indexed here, on the submitting thread: sorting many stop strings in start()
        # would stall every row of the worker's step (0.2 s at 100,000 stops).
        self._stops = output.stop_index(request) if output is not None else None
        self._out: OutputProcessor | None = None
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._listeners: list[Callable[[], None]] = []

    @property
    def done(self) -> bool:
        """True once the request is resolved (``status.finished``)."""
        return self.status >= RequestStatus.FINISHED_STOPPED

    # ----- worker side (hot path: keep cheap)
    def start(self) -> bool:
        """Admit the row (see the module docstring); False: leave it out."""
        with self._lock:
            status = self.status
            if status <= _RUNNING:
                self.status = _RUNNING
                self.start_t = time.perf_counter()
                if self._out is None and self._setup is not None:
                    self._out = self._setup.processor(self.request, self.prompt_text, self._stops)
                return True
        if status is _CANCELLING:
            self.finish(FinishReason.CANCELLED)
        return False

    def append(self, token: int, logprob: TokenLogprob | None = None) -> bool:
        """Add one generated token (and its log-probability, alternatives included, when
        the request asks for them); True when the row must end (see the module docstring)."""
        listeners: list[Callable[[], None]] | tuple[()] = ()
        with self._lock:
            if self.status is not _RUNNING:
                if self.status is RequestStatus.WAITING:
                    raise RuntimeError("RequestState.append before start(): admit the row first")
                return True  # a cancel is pending or the request was resolved elsewhere
            tokens = self.tokens
            tokens.append(token)
            if self.logprobs is not None:
                assert logprob is not None, "the loop computes one for a row that asks"
                self.logprobs.append(logprob)
            if len(tokens) == 1:
                self.first_token_t = time.perf_counter()
            out = self._out
            if out is None:
                return False
            if not self.watched:
                return out.append(token, None)
            chunks: list[Chunk] = []
            stop = out.append(token, chunks)
            if chunks:
                self._chunks.extend(chunks)
                self._cond.notify_all()
                listeners = self._listeners
        for cb in listeners:
            cb()
        return stop

    def finish(self, reason: FinishReason, error: str | None = None) -> bool:
        """Resolve the request once with ``reason``; False when it was already resolved."""
        with self._lock:
            if self.status.finished:
                return False
            if self.status is _CANCELLING and reason is not FinishReason.ERROR:
                reason = FinishReason.CANCELLED
            now = time.perf_counter()
            chunks: list[Chunk] | None = [] if self.watched else None
            output, failure = self._close_output(chunks)
            if failure is not None:
                reason, error = FinishReason.ERROR, error or failure
            self.status = RequestStatus.ended(reason)
            response = self._response(reason, error, output, now)
            self.response = response
            if self._setup is not None and self._setup.on_finish is not None:
                try:
                    self._setup.on_finish(self.submit_t, now, response)
                except Exception:  # metrics must not keep a request from resolving
                    _log.exception("on_finish failed for request %s", self.id)
            if chunks is not None:
                chunks.append(Chunk(id=self.id, done=True, response=response))
                self._chunks.extend(chunks)
            self._cond.notify_all()
            listeners = self._listeners
        # The caller may have cancelled the future (``engine.submit(...).cancel()``).
        with contextlib.suppress(InvalidStateError):
            self.future.set_result(response)
        for cb in listeners:
            cb()
        return True

    def _close_output(self, chunks: list[Chunk] | None) -> tuple[Output, str | None]:
        """The processor's final fields, or empty ones and why they could not be built."""
        if self._out is None:
            return Output(), None
        try:
            return self._out.close(chunks), None
        except BaseException as exc:  # e.g. the tokenizer failed: still resolve the request
            if not_ours(exc):
                raise
            _log.exception("building the output of request %s failed", self.id)
            return Output(), f"decoding the output failed: {type(exc).__name__}: {exc}"

    def _response(
        self, reason: FinishReason, error: str | None, output: Output, now: float
    ) -> Response:
        start = self.start_t if self.start_t is not None else now
        gen_s = now - start
        n = len(self.tokens)
        metrics = RequestMetrics(
            prompt_tokens=len(self.prompt_ids or ()),
            completion_tokens=n,
            queue_s=start - self.submit_t,
            ttft_s=(self.first_token_t - self.submit_t) if self.first_token_t is not None else None,
            total_s=now - self.submit_t,
            tokens_per_s=n / gen_s if gen_s > 0 and n else 0.0,
            batch_size=self.batch_size,
            adapters=self.adapter_names,
            cached_tokens=self.cached_tokens,
        )
        return Response(
            id=self.id,
            text=output.text,
            raw_text=output.raw_text,
            reasoning=output.reasoning,
            tool_calls=output.tool_calls,
            finish_reason=reason,
            error=error,
            prompt=self.prompt_text if self.request.return_prompt else None,
            metrics=metrics,
            parse_errors=output.parse_errors,
            logprobs=self.logprobs,
        )

    # ----- any thread
    def cancel(self) -> bool:
        """Ask to cancel; True unless the request already ended. Does not resolve it: the
        worker does at its next step (or at ``start``); a queued request is resolved by
        whoever took it out of the queue."""
        with self._lock:
            if self.status.finished:
                return False
            self.status = _CANCELLING
            return True

    def _future_done(self, future: Future[Response]) -> None:
        if future.cancelled():
            self.cancel()

    # ----- stream side
    def next_chunk(self) -> Chunk:
        """Block until the next chunk (watched states only: the last one has ``done``)."""
        with self._cond:
            while not self._chunks:
                self._cond.wait()
            return self._chunks.popleft()

    def pop_chunk(self) -> Chunk | None:
        with self._lock:
            return self._chunks.popleft() if self._chunks else None

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the worker thread) whenever chunks were queued."""
        with self._lock:
            # copy-on-write: append() and finish() call the list outside the lock
            self._listeners = [*self._listeners, listener]


class _StreamBase:
    def __init__(self, state: RequestState, cancel: Callable[[str], Any]):
        if not state.watched:
            raise ValueError("a stream needs a RequestState created with watched=True")
        self._state = state
        self._cancel = cancel
        self._ended = False  # the last chunk was handed out, or the stream was closed

    @property
    def id(self) -> str:
        return self._state.id

    @property
    def response(self) -> Response | None:
        """The final response once the request finished, else None."""
        return self._state.response

    def cancel(self) -> bool:
        """Cancel the request, as ``engine.cancel(stream.id)`` does; True if it was queued
        or running. Unlike closing, the stream goes on to its last chunk (``done``,
        ``finish_reason=CANCELLED``, the partial text), so iterating it still ends there."""
        return bool(self._cancel(self._state.id))

    def _next(self, chunk: Chunk) -> Chunk:
        if chunk.done:
            self._ended = True
        return chunk

    def _close(self) -> None:
        if not self._ended:
            self._ended = True
            if not self._state.done:
                self._cancel(self._state.id)

    def __del__(self) -> None:
        # Abandoning an unfinished stream cancels its request.
        with contextlib.suppress(Exception):
            self._close()


class RequestStream(_StreamBase):
    """Sync iterator of ``Chunk`` for one request (``engine.stream``).

    Closing it (``close()``, leaving a ``with`` block, ``break`` followed by GC)
    before the last chunk cancels the request.
    """

    def result(self, timeout: float | None = None) -> Response:
        """Block until the request ends (e.g. after ``close``) and return its response.

        ``TimeoutError`` if it has not ended within ``timeout`` seconds (None: no limit);
        the request goes on.
        """
        limit = wait_timeout(timeout, RequestError, "result")
        future = self._state.future
        try:
            return future.result(limit)
        except TimeoutError:  # the future's own carries no message at all
            if future.done():
                raise
            raise TimeoutError(
                f"request {self.id!r} did not finish within {limit} s; it goes on (wait "
                "again with result(), or close() the stream to cancel it)"
            ) from None

    def __iter__(self) -> RequestStream:
        return self

    def __next__(self) -> Chunk:
        if self._ended:
            raise StopIteration
        try:
            return self._next(self._state.next_chunk())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop iterating; a request that has not finished is cancelled (``CANCELLED``)."""
        self._close()

    def __enter__(self) -> RequestStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncRequestStream(_StreamBase):
    """Async iterator of ``Chunk`` for one request (``engine.astream``).

    Cancelling the task that iterates it, ``aclose()``, or abandoning it
    before the last chunk cancels the request.
    """

    def __init__(self, state: RequestState, cancel: Callable[[str], Any]):
        super().__init__(state, cancel)
        # The loop that iterates the stream and its wake-up event: the creating loop's
        # until another loop iterates it (``_follow``). Both change together, under
        # ``_sched_lock``, which the worker's ``_notify`` takes too.
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

        state.add_listener(listener)

    def _notify(self) -> None:
        # Called on the worker thread: coalesce wake-ups into one loop callback.
        with self._sched_lock:
            if self._scheduled:
                return
            self._scheduled = True
            loop, event = self._loop, self._event
        call_soon(loop, self._fire, event)

    def _fire(self, event: asyncio.Event) -> None:
        with self._sched_lock:
            self._scheduled = False
        event.set()

    def _follow(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wake ``loop`` from now on: the stream is iterated in another loop than the one
        that made it (``asyncio.run`` twice, a loop in another thread). Without this its
        wake-ups went to the old loop, closed or not watching, and the stream hung.
        A wake-up already sent to the old loop is not lost: its chunk is queued before
        it is sent, and ``__anext__`` looks at the queue after following."""
        with self._sched_lock:
            self._loop = loop
            self._event = asyncio.Event()
            self._scheduled = False

    async def result(self) -> Response:
        """Wait until the request ends (e.g. after ``aclose``) and return its response.

        As with ``RequestStream.result(timeout)``, giving up the wait (the awaiting task
        cancelled, ``asyncio.wait_for`` timing out) leaves the request running; close
        the stream to cancel it.
        """
        return await wait_one_way(self._state.future)

    def __aiter__(self) -> AsyncRequestStream:
        return self

    async def __anext__(self) -> Chunk:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._follow(loop)
        try:
            while True:
                if self._ended:
                    raise StopAsyncIteration
                # Clear before looking: a chunk queued after the look sets the event again.
                self._event.clear()
                chunk = self._state.pop_chunk()
                if chunk is not None:
                    return self._next(chunk)
                await self._event.wait()
        except asyncio.CancelledError:
            self._close()
            raise

    async def aclose(self) -> None:
        """Stop iterating; a request that has not finished is cancelled (``CANCELLED``)."""
        self._close()

    async def __aenter__(self) -> AsyncRequestStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._close()
