# SPDX-License-Identifier: Apache-2.0
"""``Engine``: the public facade over one loaded model and its worker thread.

Sync and async methods are twins: both build the same ``RequestState``
(``_start``) and differ only in how they wait (blocking on a
``concurrent.futures.Future`` vs awaiting a loop future fed by
``call_soon_threadsafe``). So sync calls work from any thread and async calls
work inside any running loop (notebooks), and they return identical results.

Invariants: every request resolves exactly once (STOP / LENGTH / CANCELLED /
ERROR); a failing request never raises from ``generate`` — its ``Response``
carries ``finish_reason=ERROR`` and ``error``; only misuse raises: a closed
engine, or a request that is invalid where it is built (``RequestError`` from
``Request``'s own field checks, also for ``**overrides`` and ``generate("")``).

Seams for other engine parts:

- ``engine.adapters`` is ``AdapterManager(engine)`` (``mp13_engine._adapters``);
  it reads ``engine.config``, reads/replaces ``engine._state.model`` (only
  through ``_run_on_worker``) and is asked ``_resolve_for_wave(adapters)`` for
  each row the decode loop admits, on the worker.
- ``engine._run_on_worker(fn, *a, **kw)`` runs ``fn`` on the worker between two
  steps and returns its result (or raises); ``fn`` may say what it changed of the
  weights with ``engine._note_change(change)`` (a ``WeightsChange``), so the prefix
  cache keeps the blocks of the others; one that says nothing clears it all.
- ``score``/``ascore`` (``mp13_engine._score``) are worker calls too: one forward
  over context + continuation between two steps, saying it changed nothing.
- ``engine._submit_job(job)`` queues stepwise work (see ``_scheduler.Job``);
  ``engine._cancel_job(job)`` drops a job that has not finished.

Lifecycle: the worker thread runs the step loop (``_loop.DecodeLoop``); a
watchdog thread ends requests at their deadline. ``close(timeout)`` answers
every request left behind, even when the worker is stuck in a model call; if
the worker ever dies, pending requests end ``ERROR`` and later calls raise
``EngineClosedError`` saying so (see ``_worker``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import attrs

from mp13_engine._adapters import AdapterManager
from mp13_engine._cache import Progress, check_progress
from mp13_engine._changes import NOTHING, WeightsChange
from mp13_engine._config import EngineConfig
from mp13_engine._errors import (
    ConfigError,
    EngineClosedError,
    EngineError,
    RequestError,
)
from mp13_engine._kv import check_supported
from mp13_engine._loading import Loaded, load_model
from mp13_engine._loop import DecodeLoop
from mp13_engine._metrics import EngineMetrics, MetricsRecorder
from mp13_engine._output import OutputSetup
from mp13_engine._prefix_cache import PrefixCache
from mp13_engine._prompt import PromptFormatter
from mp13_engine._request_fields import check_field_names, check_request_field
from mp13_engine._scheduler import Job, Scheduler
from mp13_engine._score import ScoreInput, prepare_score, score_on_worker
from mp13_engine._state import EngineState, TokenizerGuard, context_len_of, eos_ids_of
from mp13_engine._streams import (
    AsyncRequestStream,
    RequestState,
    RequestStream,
    wait_one_way,
    wait_timeout,
)
from mp13_engine._tool_format import ToolCallFormat
from mp13_engine._training._config import TrainingConfig
from mp13_engine._training._job import TrainingJob, start_training
from mp13_engine._types import FinishReason, Request, Response, TextScore
from mp13_engine._watchdog import StepClock
from mp13_engine._worker import Worker

RequestLike = Request | str | Sequence[dict[str, Any]]
T = TypeVar("T")


class Engine:
    """One model, one worker thread, many concurrent requests (see the module docstring).

    Create with ``Engine.load(EngineConfig(...))`` or ``Engine.load(path, **fields)``;
    use as a context manager or call ``close()``.
    """

    config: EngineConfig

    def __init__(self, config: EngineConfig, loaded: Loaded):
        self.config = config
        check_supported(loaded.model.config)
        tok = loaded.tokenizer
        tool_format = ToolCallFormat.for_tokenizer(tok, config.tool_format)
        formatter = PromptFormatter(tok, tool_format.name)
        self._state = EngineState(
            model=loaded.model,
            tokens=TokenizerGuard(tok, formatter.chat_template),
            formatter=formatter,
            device=loaded.device,
            dtype=loaded.dtype,
            pad_id=int(tok.pad_token_id if tok.pad_token_id is not None else 0),
            eos_ids=eos_ids_of(loaded.model, tok),
            context_len=context_len_of(loaded.model),
        )
        self._metrics = MetricsRecorder(config.metrics_window)
        # What each request's output processor needs; it must not reach the engine (the
        # worker keeps states a while, see _stop_worker).
        self._output = OutputSetup(self._state.tokens.decode, tool_format, self._metrics.record)
        self._inflight: dict[str, RequestState] = {}
        # Re-entrant: a future's done-callback (_forget) may run on a thread that holds it.
        self._inflight_lock = threading.RLock()
        # Submitters only (the worker never takes it): the max_queue check and the queueing
        # are one step, so threads sending at once cannot together overshoot the limit.
        self._admit_lock = threading.Lock()
        self.adapters = AdapterManager(self)
        # The worker thread must not reach the engine: an engine nobody holds any more is
        # collected, and its finalizer stops the worker, which frees the model.
        me = weakref.ref(self)
        self._prefix = PrefixCache(int(config.prefix_cache_mb * 2**20))
        self._loop = DecodeLoop(
            self._state,
            functools.partial(_adapters_of, me),
            self._prefix,
            config.max_batch_size,
            config.prefill_chunk_tokens,
            config.packed_steps,
        )
        self._worker = Worker(
            Scheduler(config.max_batch_size, config.batch_wait_ms / 1000.0),
            self._loop,
            name=f"mp13-engine-{id(self):x}",
            clock=StepClock(config.slow_step_s),
            default_timeout_s=config.request_timeout_s,
            # Not a bound method (the thread must not reach the engine, see above).
            on_stop=functools.partial(_let_go, self._state, self._prefix),
        )
        self._finalizer = weakref.finalize(self, _stop_worker, self._worker)

    # ----- properties
    @property
    def model(self) -> Any:
        """The model object (a PeftModel once adapters are loaded). Touch it only on the worker.

        None once the engine is closed (``close`` lets go of it, see there)."""
        return self._state.model

    @property
    def tokenizer(self) -> Any:
        """The transformers tokenizer (its chat template renders ``messages``)."""
        return self._state.tokens.tokenizer

    @property
    def device(self) -> str:
        """The device the model runs on (``config.device`` resolved, e.g. ``"cpu"``)."""
        return str(self._state.device)

    @property
    def dtype(self) -> str:
        """The dtype the model was loaded in (``config.dtype`` resolved, e.g. ``"float32"``;
        for a quantized model, the dtype its layers compute in)."""
        return str(self._state.dtype).removeprefix("torch.")

    @property
    def tool_format(self) -> str | None:
        """The tool-call wire format in use (configured or detected), or None: the chat
        template renders tools in a syntax no format matches (warned at load), or there
        is no chat template; replies are then not parsed for tool calls."""
        return self._state.formatter.tool_format

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called; a closed engine raises ``EngineClosedError``."""
        return self._worker.closed

    # ----- request preparation (caller thread)
    def _coerce(
        self,
        request: RequestLike,
        overrides: dict[str, Any],
        *,
        many: bool = False,
        several: str = "for several prompts use generate_many",
    ) -> Request:
        """A ``Request`` from what the caller gave; every field is checked as it is built.

        ``many``: one item of a ``*_many`` call (no advice to use ``generate_many``);
        ``several``: the advice for a list that holds several requests."""
        if isinstance(request, Request):
            return _build(request, **overrides) if overrides else request
        if isinstance(request, str):
            # "" is no prompt at all, whatever the model: the same error as Request(prompt="").
            check_request_field("prompt", request)
            if self._state.formatter.chat_template is not None:
                return _build(messages=[{"role": "user", "content": request}], **overrides)
            return _build(prompt=request, **overrides)
        if isinstance(request, Sequence) and all(isinstance(m, Mapping) for m in request):
            return _build(messages=list(request), **overrides)
        if isinstance(request, Mapping):
            raise RequestError(
                "a request is a Request, a prompt string or a list of message dicts, not one "
                "dict; for one message pass it in a list: [message]"
            )
        # The advice fits a list of several requests, not a number or None.
        listed = isinstance(request, Iterable) and not isinstance(request, (str, bytes))
        raise RequestError(
            "a request must be a Request, a prompt string or a list of message dicts, "
            f"not {type(request).__name__}" + (f"; {several}" if listed and not many else "")
        )

    def _prepare(
        self,
        request: RequestLike,
        overrides: dict[str, Any],
        watched: bool = False,
        *,
        many: bool = False,
    ) -> RequestState:
        req = self._coerce(request, overrides, many=many)
        # The worker serves the resolved sampling decision (do_sample a bool, temperature
        # positive), so the step loop needs no convention of its own.
        served = req
        if (req.do_sample, req.temperature) != (req.sampling, req.sampling_temperature):
            served = attrs.evolve(req, do_sample=req.sampling, temperature=req.sampling_temperature)
        st = RequestState(served, output=self._output, watched=watched)
        try:
            prompt = self._state.formatter.prompt(served)
            st.prompt_text = prompt.text
            st.prompt_ids = self._state.tokens.encode_prompt(prompt)
            st.max_new_tokens = self._validate(served, len(st.prompt_ids))
        except EngineError as exc:
            st.finish(FinishReason.ERROR, error=str(exc))
        return st

    def _validate(self, req: Request, prompt_len: int) -> int:
        """What only the rendered prompt tells (the fields were checked when ``req`` was built)."""
        max_new = req.max_new_tokens
        if max_new is None:
            max_new = self.config.default_max_new_tokens
        if prompt_len == 0:
            raise RequestError(
                f"invalid request {req.id}: the prompt renders to no tokens; give some text",
                field="messages" if req.messages is not None else "prompt",
            )
        ctx = self._state.context_len
        if ctx is not None:
            if prompt_len >= ctx:
                raise RequestError(
                    f"the prompt has {prompt_len} tokens but the model's context window is "
                    f"{ctx}; shorten the prompt or the conversation"
                )
            max_new = min(max_new, ctx - prompt_len)
        return max_new

    def _submit(self, states: list[RequestState]) -> None:
        """Queue the prepared states that did not already fail (together, under one lock)."""
        runnable = [s for s in states if not s.done]
        if not runnable:
            return
        with self._inflight_lock:
            for st in runnable:
                if st.id in self._inflight:
                    st.finish(
                        FinishReason.ERROR,
                        error=f"a request with id {st.id!r} is already in flight; send this one "
                        "with a new id (id=None as an override gives it a fresh one: "
                        "engine.submit(request, id=None))",
                    )
                    continue
                self._inflight[st.id] = st
                # Not a bound method: the worker may keep finished states a while, and
                # they must not keep the engine alive (see _stop_worker).
                st.future.add_done_callback(
                    functools.partial(_forget, self._inflight, self._inflight_lock, st.id, st)
                )
                # Cancelling the future of ``submit`` is ``cancel(id)``: a queued request
                # leaves the queue at once (it no longer counts against ``max_queue``).
                st.future.add_done_callback(functools.partial(_cancelled, self._worker, st))
        runnable = [s for s in runnable if not s.done]
        if runnable:
            with self._admit_lock:
                self._admit(runnable)

    def _admit(self, runnable: list[RequestState]) -> None:
        """Queue ``runnable`` if ``max_queue`` has room for all of them, else end them ERROR."""
        queued, _ = self._worker.depth()
        limit = self.config.max_queue
        if queued + len(runnable) > limit:
            # Requests sent together are queued together or not at all (they share
            # their first step); a group larger than the queue never fits.
            error = (
                f"{len(runnable)} requests sent together are more than the queue holds "
                f"(EngineConfig.max_queue={limit}); send at most {limit} at once or raise "
                "EngineConfig.max_queue"
                if len(runnable) > limit
                else f"the queue is full ({queued} of at most {limit} requests queued); "
                "retry later or raise EngineConfig.max_queue"
            )
            for st in runnable:
                st.finish(FinishReason.ERROR, error=error)
            return
        try:
            self._worker.submit_requests(runnable)
        except EngineClosedError as exc:
            # Closed since _check_open (by another thread): the caller gets the error,
            # and the states must not stay in flight unresolved.
            for st in runnable:
                st.finish(FinishReason.ERROR, error=str(exc))
            raise

    def _start(
        self, request: RequestLike, overrides: dict[str, Any], watched: bool = False
    ) -> RequestState:
        """Prepare and queue one request; ``watched``: a stream will read its chunks."""
        return self._start_many([request], overrides, watched)[0]

    def _start_many(
        self,
        requests: Iterable[RequestLike],
        overrides: dict[str, Any],
        watched: bool = False,
        *,
        many: bool = False,
    ) -> list[RequestState]:
        """Prepare requests and queue them together (they share their first step).

        ``many``: a ``*_many`` call, whose errors name the request (``requests[i]``)."""
        self._check_open()
        # Announce the requests while their prompts render, so an idle engine that is
        # collecting waits for them (concurrent callers then share their first step).
        self._worker.preparing(1)
        try:
            states = []
            for i, r in enumerate(requests):
                try:
                    states.append(self._prepare(r, overrides, watched, many=many))
                except RequestError as exc:
                    if not many:
                        raise
                    raise RequestError(f"requests[{i}]: {exc}", field=exc.field) from exc
            self._submit(states)
        finally:
            self._worker.preparing(-1)
        return states

    def _check_open(self) -> None:
        if self._worker.closed:
            raise self._worker.closed_error()
        if self._worker.on_worker_thread():
            # Waiting for a request on the thread that must run it would hang forever.
            raise EngineError(
                "generate/stream were called on the engine's worker thread (inside a job step "
                "or a _run_on_worker function); call them from another thread"
            )

    # ----- public, thread-agnostic
    def cancel(self, request_id: str) -> bool:
        """Cancel a request by id; True if it was queued or running.

        The request is resolved at once, with the text produced so far: a
        queued one never runs; a running one stops computing at the loop's
        next step (within one step), which frees its row's cache. Either way
        its response has ``finish_reason=CANCELLED``. The caller never waits
        for the model.
        """
        if not isinstance(request_id, str):
            return False  # ids are strings: no request has this one
        with self._inflight_lock:
            st = self._inflight.get(request_id)
        if st is None:
            return False
        return self._worker.cancel(st)

    def format_prompt(self, request: RequestLike, **overrides: Any) -> str:
        """Exactly the prompt text ``generate`` would feed for ``request``.

        Text inside messages that spells one of the model's control tokens is fed as
        text, which the returned string alone cannot show: ``count_tokens(request)``
        counts exactly what ``generate`` feeds, ``count_tokens(format_prompt(request))``
        the same unless message data spells control tokens.
        """
        req = self._coerce(request, overrides, several="format one request at a time")
        return self._state.formatter.render(req)

    def count_tokens(self, text: RequestLike) -> int:
        """Tokens in ``text`` as the engine tokenizes prompts (no special tokens added).

        A string is counted as text (control-token spellings count as control tokens);
        a ``Request`` or a list of messages is counted as ``generate`` feeds it, with
        message data that spells control tokens counted as text.
        """
        if isinstance(text, str):
            return len(self._state.tokens.encode(text))
        req = self._coerce(text, {}, several="count one request at a time")
        return len(self._state.tokens.encode_prompt(self._state.formatter.prompt(req)))

    def metrics(self) -> EngineMetrics:
        """Rolling aggregates over the last ``config.metrics_window`` requests that ran."""
        queued, running = self._worker.depth()
        return self._metrics.snapshot(
            queued,
            running,
            steps=self._loop.steps,
            slow_steps=self._worker.clock.slow_steps,
            prefix_cache=self._prefix.stats(),
        )

    def _run_on_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on the worker thread between two steps; return its result or raise."""
        result: T = self._worker.call(fn, *args, **kwargs).result()
        return result

    def _note_change(self, change: WeightsChange) -> None:
        """*worker*: the running call or job step changed ``change`` (``Worker.note_change``)."""
        self._worker.note_change(change)

    def _submit_job(self, job: Job) -> None:
        """Queue stepwise work (training); the scheduler interleaves its steps with decode steps."""
        self._worker.submit_job(job)

    def _cancel_job(self, job: Job) -> bool:
        return self._worker.cancel_job(job)

    @classmethod
    def load(
        cls,
        model: EngineConfig | str | os.PathLike[str] | None = None,
        /,
        *,
        progress: Progress | None = None,
        **fields: Any,
    ) -> Engine:
        """Load a model and start the engine. ``fields`` are ``EngineConfig`` fields.

        ``progress`` (optional) is called with ``mp13_engine.models.FetchProgress``
        reports of slow first-time steps: converting a GGUF file into the cache,
        downloading a hub model with ``download=True``; and of loading the weights
        (stage ``"load"``), which transformers would otherwise draw as its "Loading
        weights" bar on stderr (it still does without ``progress``, unless turned off by
        ``transformers.utils.logging.disable_progress_bar()``).
        """
        config = _config_from(model, fields)
        check_progress(progress, "Engine.load")
        ToolCallFormat.check(config.tool_format)  # fail before loading any weights
        return cls(config, load_model(config, progress))

    @classmethod
    async def aload(
        cls,
        model: EngineConfig | str | os.PathLike[str] | None = None,
        /,
        *,
        progress: Progress | None = None,
        **fields: Any,
    ) -> Engine:
        """``load`` in a thread, so the running loop stays responsive."""
        return await asyncio.to_thread(cls.load, model, progress=progress, **fields)

    # ----- sync API
    def generate(self, request: RequestLike, **overrides: Any) -> Response:
        """Run one request to completion. ``overrides`` set Request fields.

        ``request``: a ``Request``, a list of message dicts, or a string, which is one
        user message when the model has a chat template (raw text without one;
        ``Request(prompt=...)`` is always raw text).
        """
        return self._wait([self._start(request, overrides)])[0]

    def generate_many(self, requests: Iterable[RequestLike], **overrides: Any) -> list[Response]:
        """Submit all requests together (they share steps) and return responses in order.

        ``overrides`` apply to every request. Every request is checked before any is
        queued: a bad one raises ``RequestError`` naming it (``requests[i]: ...``).
        """
        return self._wait(self._start_many(_many(requests), overrides, many=True))

    def score(
        self,
        request: RequestLike,
        continuation: str,
        *,
        top_logprobs: int | None = None,
        **overrides: Any,
    ) -> TextScore:
        """The log-probability the model gives ``continuation`` after ``request``.

        ``request`` is the context, given as to ``generate`` and rendered exactly as
        ``generate`` renders it (a chat gets the generation prompt, so the continuation
        is scored as the assistant's reply; ``continue_final=True`` continues the last
        assistant message instead); its ``adapters`` choose the weights (the defaults,
        the base model, one adapter or a combination). ``overrides`` set Request fields.
        Returns a ``TextScore``: one ``TokenLogprob`` per continuation token (with
        ``top_logprobs`` alternatives each, 0 to 20; ``None`` = the request's), their
        sum, mean and perplexity.

        The continuation's tokens are those of context + continuation encoded together
        after the context's own, which must be a prefix of them (else ``RequestError``:
        move the characters at the boundary into the continuation); control-token
        spellings in it are control tokens. One forward on the worker between two
        steps (no KV kept), so requests being served go on. Raises ``RequestError``
        for an empty continuation, one that does not fit the context window, or a
        request that reshapes the distribution (``repetition_penalty``, sampling
        warpers); ``AdapterError`` for an adapter that is not loaded.
        """
        job = self._score_job(request, continuation, top_logprobs, overrides)
        result: TextScore = self._worker.call(self._score_on_worker, job).result()
        return result

    def _score_job(
        self,
        request: RequestLike,
        continuation: str,
        top_logprobs: int | None,
        overrides: dict[str, Any],
    ) -> ScoreInput:
        """*caller thread*: ``score``'s checked input (see ``_score.prepare_score``)."""
        self._check_open()
        req = self._coerce(request, overrides, several="score one context at a time")
        return prepare_score(self._state, req, continuation, top_logprobs)

    def _score_on_worker(self, job: ScoreInput) -> TextScore:
        self._note_change(NOTHING)  # reads only; a combination built for it says its own
        return score_on_worker(self._state, self.adapters, job)

    def _wait(self, states: list[RequestState]) -> list[Response]:
        """The responses of ``states``, in order; an interrupted wait cancels them."""
        try:
            return [st.future.result() for st in states]
        except BaseException:  # KeyboardInterrupt etc.: don't leave them running
            for st in states:
                self.cancel(st.id)
            raise

    def stream(self, request: RequestLike, **overrides: Any) -> RequestStream:
        """Iterate ``Chunk`` deltas; the last chunk has ``done=True`` and the response."""
        st = self._start(request, overrides, watched=True)
        return RequestStream(st, self.cancel)

    def submit(self, request: RequestLike, **overrides: Any) -> Future[Response]:
        """Queue a request and return a ``concurrent.futures.Future`` of its response.

        Cancelling that future cancels the request (as ``cancel(id)`` does)."""
        return self._start(request, overrides).future

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker: queued requests end CANCELLED, running rows stop at their next step.

        ``timeout`` (seconds, None = no limit) bounds the wait for the step in progress;
        past it, that step's requests are resolved CANCELLED at once. Closing twice
        does nothing. After ``close`` every call that needs the model raises
        ``EngineClosedError``.

        Closing lets go of the model and empties the prefix cache, so their memory is
        freed even while this engine object is still referenced (a ``with`` block's
        variable, a notebook cell's): loading another model next does not need both in
        memory. (A step still running past ``timeout``, or a ``close`` called on the
        worker thread itself, e.g. in a future's done-callback, keeps them until that step
        ends; the worker lets go of them then.)
        The tokenizer stays: ``format_prompt`` and ``count_tokens`` still work.

        An engine that is never closed is stopped when it is garbage-collected (or at
        interpreter exit), which frees its model; closing it is still the clean way.
        """
        timeout = wait_timeout(timeout, EngineError, "close")
        self._finalizer.detach()
        self._worker.close(timeout)  # which lets go of the model (see _let_go)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ----- async twins
    async def agenerate(self, request: RequestLike, **overrides: Any) -> Response:
        """Async ``generate``; cancelling the awaiting task cancels the request."""
        st = self._start(request, overrides)
        return await _await_state(st, self.cancel)

    async def agenerate_many(
        self, requests: Iterable[RequestLike], **overrides: Any
    ) -> list[Response]:
        """Async ``generate_many``; cancelling the awaiting task cancels every request."""
        states = self._start_many(_many(requests), overrides, many=True)
        try:
            return [await _await_state(st, self.cancel) for st in states]
        except asyncio.CancelledError:
            for st in states:
                self.cancel(st.id)
            raise

    async def ascore(
        self,
        request: RequestLike,
        continuation: str,
        *,
        top_logprobs: int | None = None,
        **overrides: Any,
    ) -> TextScore:
        """Async ``score``; the forward runs on the worker while the loop stays responsive."""
        job = self._score_job(request, continuation, top_logprobs, overrides)
        result: TextScore = await wait_one_way(self._worker.call(self._score_on_worker, job))
        return result

    def astream(self, request: RequestLike, **overrides: Any) -> AsyncRequestStream:
        """Async iterator of ``Chunk``; call from inside a running event loop
        (``EngineError`` outside one, before anything is queued)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError as exc:
            raise EngineError(
                "astream() needs a running event loop: use `async for chunk in "
                "engine.astream(...)` inside an async function; outside one use engine.stream(...)"
            ) from exc
        st = self._start(request, overrides, watched=True)
        return AsyncRequestStream(st, self.cancel)

    async def aclose(self, timeout: float | None = None) -> None:
        """Async ``close`` (it waits in a thread, so the running loop stays responsive)."""
        timeout = wait_timeout(timeout, EngineError, "aclose")
        self._finalizer.detach()
        await asyncio.to_thread(self._worker.close, timeout)

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ----- training (delegates to mp13_engine._training)
    def train(self, config: TrainingConfig) -> TrainingJob:
        """Start a LoRA training job on this engine's model; returns a ``TrainingJob``."""
        if self._worker.closed:  # before the config and dataset are checked: none of that helps
            raise self._worker.closed_error()
        return start_training(self.adapters.training_host(), config)


def _forget(
    inflight: dict[str, RequestState],
    lock: threading.RLock,
    rid: str,
    st: RequestState,
    _future: Future[Response],
) -> None:
    with lock:
        if inflight.get(rid) is st:
            del inflight[rid]


def _let_go(state: EngineState, prefix: PrefixCache) -> None:
    """Drop a closed engine's model and cached keys and values, so their memory is freed
    while the engine object is still held; the worker calls it once its thread has ended
    and ``close`` is done with them."""
    prefix.clear()
    state.model = None


def _cancelled(worker: Worker, st: RequestState, future: Future[Response]) -> None:
    """A request's future was cancelled (``submit(...).cancel()``): cancel the request."""
    if future.cancelled():
        worker.cancel(st)


def _adapters_of(engine_ref: weakref.ref[Engine]) -> AdapterManager:
    engine = engine_ref()
    if engine is None:
        raise EngineClosedError(
            "the engine was garbage-collected while this request was queued or running; "
            "keep a reference to the engine (or use `with Engine.load(...) as engine:`) "
            "until its requests finish"
        )
    return engine.adapters


def _stop_worker(worker: Worker) -> None:
    """Finalizer of an engine that was never closed (and of any engine at exit)."""
    worker.close(timeout=1.0)


def _build(base: Request | None = None, /, **fields: Any) -> Request:
    """A ``Request`` of ``fields`` (over ``base``, when given); an unknown keyword is a
    RequestError naming the fields, not attrs' TypeError."""
    check_field_names(fields)
    return Request(**fields) if base is None else attrs.evolve(base, **fields)


async def _await_state(st: RequestState, cancel: Callable[[str], bool]) -> Response:
    """Await a request's response; cancelling the awaiting task cancels the request."""
    try:
        return await wait_one_way(st.future)
    except asyncio.CancelledError:
        cancel(st.id)
        raise


def _config_from(
    model: EngineConfig | str | os.PathLike[str] | None, fields: dict[str, Any]
) -> EngineConfig:
    if isinstance(model, EngineConfig):
        return model.replace(**fields) if fields else model
    if model is None:
        if "model" not in fields:
            raise ConfigError("Engine.load needs a model: a path, a hub id or an EngineConfig")
        return EngineConfig.from_dict(fields)
    if isinstance(model, (str, os.PathLike)):
        return EngineConfig.from_dict({"model": os.fspath(model), **fields})
    raise ConfigError(
        f"Engine.load got {type(model).__name__}; give an EngineConfig, a model path or a hub id"
    )


def _many(requests: object) -> list[RequestLike]:
    """The requests of a ``*_many`` call; a single request given alone is refused."""
    if (
        isinstance(requests, Sequence)
        and requests
        and all(isinstance(m, Mapping) for m in requests)
    ):
        raise RequestError(
            "generate_many got one list of message dicts (one conversation); "
            "pass a list of requests: generate_many([messages, ...])"
        )
    if isinstance(requests, (str, Request, Mapping)) or not isinstance(requests, Iterable):
        raise RequestError(
            f"generate_many takes a list of requests, not {type(requests).__name__}; "
            "wrap a single request as [request], or call generate for it"
        )
    return list(requests)
