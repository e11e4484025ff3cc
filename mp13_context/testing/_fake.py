# SPDX-License-Identifier: MIT
"""``FakeEngine``: a scripted stand-in for ``mp13_engine.Engine`` in fast tests.

It satisfies ``EngineClient``. Replies come from a queue of scripted
``FakeReply``s (``engine.script(...)``), and when the queue is empty from a
``responder(request) -> FakeReply | str`` (default: an echo of the last user
message, a pure function of the request, so replays reproduce it).

Behaviour that tests can rely on:

- Every request is recorded in ``requests`` (in arrival order).
- A reply streams as chunks of ``chunk_size`` characters with ``delay_s``
  seconds before each chunk (and a turn of the event loop even without a
  delay); tool calls are emitted after the text, each on its own chunk; the
  last chunk has ``done=True`` and the ``Response``.
- ``cancel(id)`` stops a running request after the current chunk: the response
  has ``finish_reason=CANCELLED`` and the text so far. Task cancellation
  propagates ``CancelledError`` as a real engine's would.
- Requests in flight at the same time are one batch: ``max_in_flight`` is the
  most seen at once, and a request's ``metrics.batch_size`` the most in flight
  at once during its life.
- A token is a whitespace-separated word: ``count_tokens(text)`` counts the
  words of a string, ``count_tokens(request)`` those of ``format_prompt(request)``
  (the response's ``prompt_tokens``).
- A ``FakeReply(error=...)`` resolves with ``finish_reason=ERROR``;
  ``FakeReply(raise_exc=...)`` raises from ``agenerate``/``astream``.
- ``Request(logprobs=True)`` fills ``Response.logprobs`` with one ``TokenLogprob`` per
  word of the reply (``fake_logprobs``): a pure function of the word and its place,
  so the same reply always gets the same values, each a log-probability (<= 0),
  and ``top_logprobs=N`` gives each N alternatives, most likely first, the word's
  token among them, whose probabilities sum to at most 1 (a real distribution
  could have them). Not asked for, ``Response.logprobs`` is ``None``.
- It may be shared by threads, each with its own event loop (as the sync API's
  cursors, one per thread, use it): its bookkeeping is under one lock. Which
  scripted reply a request gets is then the order in which requests arrive.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

import attrs

from mp13_context._model import as_tuple
from mp13_engine import Chunk, FinishReason, Request, RequestMetrics, Response, TokenLogprob
from mp13_toolbox import ToolCall


@attrs.frozen(kw_only=True)
class FakeReply:
    """One scripted reply."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=as_tuple)
    finish_reason: FinishReason = FinishReason.STOP
    error: str | None = None
    raise_exc: BaseException | None = None
    delay_s: float | None = None  # per chunk; None = the engine's default


def echo(request: Request) -> FakeReply:
    """The default responder: ``"echo: <last user message>"``; continues with ``" (more)"``."""
    if request.continue_final:
        return FakeReply(text=" (more)")
    last = ""
    for msg in request.messages or ():
        if msg.get("role") == "user":
            last = str(msg.get("content", ""))
    if request.prompt is not None:
        last = request.prompt
    return FakeReply(text=f"echo: {last}")


#: The fake's vocabulary size: a word's token id is below it.
_VOCAB = 50_000


def fake_logprobs(text: str, top_logprobs: int = 0) -> tuple[TokenLogprob, ...]:
    """One ``TokenLogprob`` per whitespace-separated word of ``text`` (a fake token).

    Deterministic: the token id is the word's CRC-32 modulo 50,000 and its
    probability (between 0.02 and 1) comes from the word and its place. With
    ``top_logprobs=N`` each token gets N alternatives, most likely first: its own
    token and N-1 others, which share what probability is left (halving each time),
    so they sum to at most 1.
    """
    out = []
    for place, word in enumerate(text.split()):
        token = zlib.crc32(word.encode()) % _VOCAB
        mix = zlib.crc32(f"{place}:{word}".encode())
        p = 0.02 + 0.98 * (mix % 1000) / 1000
        candidates = [(p, token)]
        left = 1.0 - p
        for k in range(1, top_logprobs):
            left /= 2
            candidates.append((left, (token + k * 7919) % _VOCAB))
        candidates.sort(key=lambda c: -c[0])  # stable: the word's token first on a tie
        top = [TokenLogprob(t, math.log(q)) for q, t in candidates if q > 0][:top_logprobs]
        out.append(TokenLogprob(token, math.log(p), top))
    return tuple(out)


Responder = Callable[[Request], "FakeReply | str"]


class FakeEngine:
    """A scripted engine (see the module docstring)."""

    def __init__(
        self,
        replies: Iterable[FakeReply | str] = (),
        *,
        responder: Responder = echo,
        chunk_size: int = 4,
        delay_s: float = 0.0,
    ) -> None:
        self._lock = threading.Lock()  # the bookkeeping below, for threads sharing it
        self._queue: deque[FakeReply] = deque()
        self.script(*replies)
        self.responder = responder
        self.chunk_size = max(1, chunk_size)
        self.delay_s = delay_s
        self.requests: list[Request] = []
        self.cancelled: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._cancel_flags: set[str] = set()
        self._running: set[str] = set()
        self._peaks: dict[str, int] = {}

    def script(self, *replies: FakeReply | str) -> FakeEngine:
        """Queue replies (a ``str`` is a plain text reply); returns the engine."""
        with self._lock:
            self._queue.extend(FakeReply(text=r) if isinstance(r, str) else r for r in replies)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        return len(self._queue)

    def _next(self, request: Request) -> FakeReply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        made = self.responder(request)
        return FakeReply(text=made) if isinstance(made, str) else made

    # --- EngineClient ----------------------------------------------------------------

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            if request_id in self._running:
                self._cancel_flags.add(request_id)
                self.cancelled.append(request_id)
                return True
            return False

    def format_prompt(self, request: Request) -> str:
        """A ChatML-like rendering: deterministic, enough to count and compare."""
        if request.prompt is not None:
            return request.prompt
        parts = []
        for m in request.messages or ():
            extra = ""
            if m.get("tool_calls"):
                extra = " " + " ".join(str(c["function"]) for c in m["tool_calls"])
            parts.append(f"<|im_start|>{m['role']}\n{m.get('content', '')}{extra}<|im_end|>")
        if request.tools:
            parts.insert(0, f"<tools>{[t['function']['name'] for t in request.tools]}</tools>")
        if not request.continue_final:
            parts.append("<|im_start|>assistant\n")
        return "\n".join(parts)

    def count_tokens(self, text: str | Request) -> int:
        """Whitespace-separated words of ``text``, or of ``format_prompt(request)``."""
        if isinstance(text, Request):
            text = self.format_prompt(text)
        return len(text.split())

    async def agenerate(self, request: Request) -> Response:
        response = None
        async for chunk in self.astream(request):
            if chunk.done:
                response = chunk.response
        assert response is not None
        return response

    async def astream(self, request: Request) -> AsyncIterator[Chunk]:
        reply = self._next(request)
        if reply.raise_exc is not None:
            raise reply.raise_exc
        start = time.perf_counter()
        with self._lock:
            self._running.add(request.id)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            for rid in self._running:  # a request's wave: the most in flight during its life
                self._peaks[rid] = max(self._peaks.get(rid, 0), self.in_flight)
        await asyncio.sleep(0)  # let requests gathered with this one join the wave
        delay = self.delay_s if reply.delay_s is None else reply.delay_s
        text = ""
        finish = reply.finish_reason
        ttft = None
        try:
            if reply.error is None:
                if reply.reasoning:
                    yield Chunk(id=request.id, reasoning=reply.reasoning)
                for i in range(0, len(reply.text), self.chunk_size):
                    # Even with no delay, give the loop a turn per chunk: tokens arrive
                    # over time, as from a real engine, so a consumer can react mid-reply.
                    await asyncio.sleep(delay)
                    if request.id in self._cancel_flags:  # a set read: atomic
                        finish = FinishReason.CANCELLED
                        break
                    piece = reply.text[i : i + self.chunk_size]
                    text += piece
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    yield Chunk(id=request.id, text=piece)
                calls = reply.tool_calls if finish is not FinishReason.CANCELLED else ()
                for call in calls:
                    yield Chunk(id=request.id, tool_call=call)
            else:
                finish, calls = FinishReason.ERROR, ()
            total = time.perf_counter() - start
            completion = self.count_tokens(text)
            response = Response(
                id=request.id,
                text=text,
                raw_text=text,
                reasoning=reply.reasoning,
                tool_calls=calls,
                finish_reason=finish,
                error=reply.error,
                prompt=self.format_prompt(request) if request.return_prompt else None,
                logprobs=fake_logprobs(text, request.top_logprobs) if request.logprobs else None,
                metrics=RequestMetrics(
                    prompt_tokens=self.count_tokens(request),
                    completion_tokens=completion,
                    ttft_s=ttft,
                    total_s=total,
                    tokens_per_s=completion / total if total > 0 else 0.0,
                    batch_size=self._peaks.get(request.id, 1),  # a dict read: atomic
                    adapters=request.adapters or (),
                ),
            )
            yield Chunk(id=request.id, done=True, response=response)
        except asyncio.CancelledError:  # task cancelled or stream closed: a real engine stops too
            with self._lock:
                self.cancelled.append(request.id)
            raise
        finally:
            with self._lock:
                self.in_flight -= 1
                self._running.discard(request.id)
                self._cancel_flags.discard(request.id)
                self._peaks.pop(request.id, None)
