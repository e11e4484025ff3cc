# SPDX-License-Identifier: Apache-2.0
"""Runs waves on the worker thread and turns finished rows into ``Response`` values.

``WaveRunner.run(states)`` resolves adapters per row, left-pads the prompts,
calls ``model.generate`` once with the per-row hooks of ``_generation`` and
makes sure every state is resolved exactly once. If ``generate`` raises, the
rows that had not produced a token yet are retried one by one so a single bad
row cannot fail its neighbours; rows that had already streamed tokens end with
``ERROR`` (their partial text is kept).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from mp13_engine._errors import AdapterError
from mp13_engine._generation import Row, RowController, RowSampler, greedy_config, left_pad
from mp13_engine._metrics import MetricsRecorder
from mp13_engine._state import EngineState
from mp13_engine._streams import RequestState
from mp13_engine._toolwire import ToolWire
from mp13_engine._types import BASE_ADAPTER, FinishReason, RequestMetrics, Response

_log = logging.getLogger(__name__)


class ResponseBuilder:
    """Builds the final ``Response`` of a request (any thread) and records its metrics."""

    def __init__(self, state: EngineState, metrics: MetricsRecorder, toolwire: ToolWire):
        self._state = state
        self._metrics = metrics
        self._toolwire = toolwire

    def text_of(self, st: RequestState, tokens: list[int]) -> str:
        text = self._state.tokens.decode(tokens)
        stops = [s for s in st.request.stop if s]
        if stops:
            cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
        return text

    def finish(
        self, st: RequestState, reason: FinishReason, error: str | None = None
    ) -> Response | None:
        """Resolve ``st`` with its final response; None when it was already resolved."""
        if st.done:
            return None
        now = time.perf_counter()
        tokens = st.seal()  # no pushes after this: response and streams agree
        raw = self.text_of(st, tokens) if tokens else ""
        text, reasoning, calls, parse_errors = raw, "", (), ()
        if raw:
            parsed = self._toolwire.parse(raw, st.request, st.prompt_text)
            if parsed is not None:
                text, reasoning = parsed.content, parsed.reasoning
                calls, parse_errors = parsed.tool_calls, parsed.errors
        start = st.start_t if st.start_t is not None else now
        gen_s = now - start
        n = len(tokens)
        metrics = RequestMetrics(
            prompt_tokens=len(st.prompt_ids or ()),
            completion_tokens=n,
            queue_s=start - st.submit_t,
            ttft_s=(st.first_token_t - st.submit_t) if st.first_token_t is not None else None,
            total_s=now - st.submit_t,
            tokens_per_s=n / gen_s if gen_s > 0 and n else 0.0,
            batch_size=st.batch_size,
            adapters=st.adapter_names,
        )
        response = Response(
            id=st.id,
            text=text,
            raw_text=raw,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=reason,
            error=error,
            prompt=st.prompt_text if st.request.return_prompt else None,
            metrics=metrics,
            parse_errors=parse_errors,
        )
        if st.finish(response):
            self._metrics.record(st.submit_t, now, response)
            return response
        return None


class WaveRunner:
    """Executes one wave (worker thread only)."""

    def __init__(
        self,
        state: EngineState,
        builder: ResponseBuilder,
        adapters: Callable[[], Any],
    ):
        self._state = state
        self._builder = builder
        self._adapters = adapters

    def run(self, states: list[RequestState]) -> None:
        """Run one wave; never raises (a bug here must not kill the worker thread)."""
        try:
            self._run(states)
        except Exception as exc:
            _log.exception("wave failed outside generate; failing its unresolved rows")
            for st in states:
                if st.done:
                    continue
                try:
                    self._builder.finish(st, FinishReason.ERROR, error=_message(exc))
                except Exception:
                    st.finish(
                        Response(id=st.id, finish_reason=FinishReason.ERROR, error=_message(exc))
                    )

    def _run(self, states: list[RequestState]) -> None:
        live = []
        for st in states:
            if st.done:
                continue
            if st.cancel_requested:
                self._builder.finish(st, FinishReason.CANCELLED)
                continue
            try:
                manager = self._adapters()
                st.adapter = manager._resolve_for_wave(st.request.adapters)
                st.adapter_names = _requested_names(manager, st.request.adapters)
            except AdapterError as exc:
                self._builder.finish(st, FinishReason.ERROR, error=str(exc))
                continue
            except Exception as exc:
                self._builder.finish(
                    st, FinishReason.ERROR, error=f"adapter resolution failed: {exc}"
                )
                continue
            live.append(st)
        if not live:
            return
        try:
            self._generate(live)
        except Exception as exc:
            self._recover(live, exc)

    def _recover(self, states: list[RequestState], exc: BaseException) -> None:
        if _is_oom(exc) and self._state.device.type == "cuda":
            torch.cuda.empty_cache()
        fresh = [s for s in states if not s.done and not s.tokens]
        if len(states) > 1 and fresh:
            for st in states:
                if not st.done and st.tokens:
                    self._builder.finish(st, FinishReason.ERROR, error=_message(exc))
            for st in fresh:
                try:
                    self._generate([st])
                except Exception as solo_exc:
                    self._builder.finish(st, FinishReason.ERROR, error=_message(solo_exc))
            return
        for st in states:
            if not st.done:
                self._builder.finish(st, FinishReason.ERROR, error=_message(exc))

    def _generate(self, states: list[RequestState]) -> None:
        es = self._state
        model = es.model
        ids, mask, pads = left_pad([s.prompt_ids or [] for s in states], es.pad_id, es.device)
        rows = [Row(st, pad) for st, pad in zip(states, pads, strict=True)]
        now = time.perf_counter()
        for st in states:
            st.start_t = now
            st.batch_size = len(states)
            st.tokens.clear()
            st.visible = 0
            st.first_token_t = None

        def finish_row(row: Row, reason: FinishReason) -> None:
            self._builder.finish(row.state, reason)

        controller = RowController(
            rows, set(es.eos_ids), finish_row, es.tokens.decode, es.device, time.perf_counter
        )
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "generation_config": greedy_config(max(r.max_new for r in rows), es.pad_id, es.eos_ids),
            "stopping_criteria": [controller],
        }
        if any(r.needs_processing for r in rows):
            kwargs["logits_processor"] = [RowSampler(rows, es.eos_ids, es.device)]
        fused = None
        if hasattr(model, "peft_config") and hasattr(model, "base_model"):
            names = [s.adapter or BASE_ADAPTER for s in states]
            planner = getattr(self._adapters(), "_fused_plan_on_worker", None)
            fused = planner(names) if planner is not None else None
            # Fused: PEFT adds nothing (every row on the base) and the plan's hooks add the deltas.
            kwargs["adapter_names"] = [BASE_ADAPTER] * len(names) if fused else names
        # A training job may leave the model in train mode between its steps;
        # inference must not see dropout, so waves always run in eval mode.
        was_training = bool(getattr(model, "training", False))
        if was_training:
            model.eval()
        try:
            with (
                torch.inference_mode(),
                fused.installed() if fused else contextlib.nullcontext(),
            ):
                model.generate(**kwargs)
        finally:
            if was_training:
                model.train()
        # generate can end without our controller finishing a row (e.g. the model's
        # own length limit): those rows ran out of room.
        for row in rows:
            if not row.done:
                row.done = True
                self._builder.finish(row.state, FinishReason.LENGTH)


def _requested_names(manager: Any, adapters: Any) -> tuple[str, ...]:
    """The adapter names a row runs with (the defaults when the request left it unset)."""
    if adapters is None:
        adapters = getattr(manager, "defaults", ())
    return tuple(dict.fromkeys(n for n in adapters if n != BASE_ADAPTER))


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _message(exc: BaseException) -> str:
    if _is_oom(exc):
        return (
            f"out of memory while generating ({exc}); retry with fewer or shorter requests, "
            "a smaller max_batch_size, or a quantized model"
        )
    return f"generation failed: {type(exc).__name__}: {exc}"
