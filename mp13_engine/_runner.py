# SPDX-License-Identifier: Apache-2.0
"""Runs waves on the worker thread.

``WaveRunner.run(states)`` admits each row (``RequestState.start``), resolves
adapters per row, left-pads the prompts, calls ``model.generate`` once with the
per-row hooks of ``_generation`` and makes sure every state is resolved exactly
once (``RequestState.finish``: each state builds its own ``Response``). If
``generate`` raises, the rows that had not produced a token yet are retried one
by one so a single bad row cannot fail its neighbours; rows that had already
streamed tokens end with ``ERROR`` (their partial text is kept).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch

from mp13_engine._errors import AdapterError
from mp13_engine._generation import Row, RowController, RowSampler, greedy_config, left_pad
from mp13_engine._state import EngineState
from mp13_engine._streams import RequestState
from mp13_engine._types import BASE_ADAPTER, FinishReason

_log = logging.getLogger(__name__)


class WaveRunner:
    """Executes one wave (worker thread only)."""

    def __init__(self, state: EngineState, adapters: Callable[[], Any]):
        self._state = state
        self._adapters = adapters

    def run(self, states: list[RequestState]) -> None:
        """Run one wave; never raises (a bug here must not kill the worker thread)."""
        try:
            self._run(states)
        except Exception as exc:
            _log.exception("wave failed outside generate; failing its unresolved rows")
            for st in states:
                st.finish(FinishReason.ERROR, error=_message(exc))

    def _run(self, states: list[RequestState]) -> None:
        live = []
        for st in states:
            if not st.start():  # cancelled before it ran (now resolved) or already resolved
                continue
            try:
                manager = self._adapters()
                st.adapter = manager._resolve_for_wave(st.request.adapters)
                st.adapter_names = _requested_names(manager, st.request.adapters)
            except AdapterError as exc:
                st.finish(FinishReason.ERROR, error=str(exc))
                continue
            except Exception as exc:
                st.finish(FinishReason.ERROR, error=f"adapter resolution failed: {exc}")
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
                    st.finish(FinishReason.ERROR, error=_message(exc))
            for st in fresh:
                try:
                    self._generate([st])
                except Exception as solo_exc:
                    st.finish(FinishReason.ERROR, error=_message(solo_exc))
            return
        for st in states:
            if not st.done:
                st.finish(FinishReason.ERROR, error=_message(exc))

    def _generate(self, states: list[RequestState]) -> None:
        es = self._state
        model = es.model
        # Admitted again: a retried row (see _recover) has no tokens yet; a row cancelled
        # meanwhile is resolved by start() and left out.
        states = [st for st in states if st.start()]
        if not states:
            return
        ids, mask, pads = left_pad([s.prompt_ids or [] for s in states], es.pad_id, es.device)
        rows = [Row(st, pad) for st, pad in zip(states, pads, strict=True)]
        for st in states:
            st.batch_size = len(states)
        controller = RowController(rows, set(es.eos_ids), es.device)
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
                row.state.finish(FinishReason.LENGTH)


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
