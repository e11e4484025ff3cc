# SPDX-License-Identifier: Apache-2.0
"""``ModelCall``: one forward of the model over a batch of rows, with each row's adapter.

The step loop (``_loop``) calls the model's own ``forward`` with a
``BatchKV``'s ``DynamicCache``, the attention mask and position ids from the
rows' lengths, and ``logits_to_keep=1`` (only the last position's logits are
needed). Rows may use different adapters:

* the fused mixed-LoRA path (``_fused_lora``): the plan of this batch's row
  adapters is made once per batch composition and kept while the rows do not
  change (rows joining or leaving change the per-row weights, so the plan is
  keyed by the rows' adapter names); its hooks are installed for the forward
  only, and PEFT is told every row is on ``__base__``;
* PEFT's own per-row ``adapter_names`` loop: when fusing does not apply, when
  the config asks for it (``mixed_lora="peft"``), when planning fails (logged,
  never a failed request), and when the loop retries rows after a fault.

A forward that raises leaves no PEFT per-forward hook behind (they would pile
up on every LoRA layer with each fault). Plans are dropped whenever adapters or
their weights may have changed (:meth:`forget_plans`, called by the loop after
every worker call or job step).
A *packed* forward (:meth:`ModelCall.packed`) computes several batches of rows
in one input row (see ``_packed``); rows on several adapters pack only with a
fused plan, spread over each row's tokens (PEFT's loop needs one batch row per
adapter).
Worker thread only; returns float32 logits ``(rows, vocab)``, wherever the
model leaves them (a model spread over devices may return them on its last).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from mp13_engine._compat import (
    attention_implementation,
    drop_leaked_forward_hooks,
    forward_arguments,
    is_peft_model,
    peft_base_model,
    register_attention,
)
from mp13_engine._fused_lora import FusedPlan
from mp13_engine._packed import ATTENTION, PACK_KWARG, PackedCache, packed_attention
from mp13_engine._state import EngineState
from mp13_engine._types import BASE_ADAPTER

_log = logging.getLogger(__name__)

#: Most batch compositions whose fused plans are kept at once (the decode batch and a
#: prefill group or two).
_PLANS_KEPT = 4


class ModelCall:
    """Calls ``state.model`` for a batch of rows (see the module docstring)."""

    def __init__(self, state: EngineState, adapters: Callable[[], Any]):
        self._state = state
        self._adapters = adapters
        self._plans: dict[tuple[str, ...], FusedPlan | None] = {}
        self._signatures: dict[type, tuple[bool, str]] = {}
        self._plan_failed = False

    def forget_plans(self) -> None:
        self._plans.clear()

    def __call__(
        self,
        names: Sequence[str],
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor,
        cache: Any,
        fused: bool = True,
    ) -> torch.Tensor:
        """Each row's last logits ``(rows, vocab)``; row ``i`` on adapter ``names[i]``."""
        plan = self._plan(tuple(names)) if fused else None
        # Fused: PEFT adds nothing (every row on the base) and the plan's hooks add the
        # deltas. Unfused: PEFT's own per-row loop. Either way no global adapter switch.
        rows = [BASE_ADAPTER] * len(names) if plan else list(names)
        out = self._run(rows, plan, input_ids, mask, positions, cache, keep=1)
        return out.logits[:, -1, :].float()  # type: ignore[no-any-return]

    def whole(self, name: str, input_ids: torch.Tensor, keep: int) -> torch.Tensor:
        """The logits of the last ``keep`` positions (or of all, for a model without
        ``logits_to_keep``) of one row ``(1, length)`` on adapter ``name``, through PEFT's
        own path and without a KV cache: a forward that serves no decode row (scoring)."""
        out = self._run([name], None, input_ids, None, None, None, keep)
        return out.logits[0]  # type: ignore[no-any-return]

    def packable(self, names: Sequence[str]) -> bool:
        """Whether rows on ``names`` can share a packed input row: one adapter, or a fused plan."""
        return len(set(names)) == 1 or self._plan(tuple(names)) is not None

    def packed(self, names: Sequence[str], cache: PackedCache) -> torch.Tensor:
        """One forward over ``cache``'s parts; ``names``: each row's adapter, in part order.

        Returns the logits of each sampled row ``(rows, vocab)``, part by part. Rows on
        several adapters need a fused plan (:meth:`packable`); it is spread over each
        row's tokens.
        """
        distinct = set(names)
        if len(distinct) == 1:
            name = distinct.pop()
            plan = self._plan((name,))
            rows = [BASE_ADAPTER if plan else name]
        else:
            plan = self._plan(tuple(names))
            if plan is None:
                raise ValueError("rows on several adapters pack only with a fused LoRA plan")
            plan, rows = plan.spread(cache.row_tokens()), [BASE_ADAPTER]
        base = peft_base_model(self._state.model)
        register_attention(ATTENTION, packed_attention)
        with attention_implementation(base, ATTENTION):
            ids, pos = cache.input_ids, cache.position_ids
            out = self._run(rows, plan, ids, None, pos, cache, cache.keep, {PACK_KWARG: cache})
        cache.check()
        kept = out.logits[0] if self._signature(base)[0] else out.logits[0, cache.keep]
        return kept.float()  # type: ignore[no-any-return]

    def _run(
        self,
        rows: list[str],
        plan: FusedPlan | None,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        cache: Any,
        keep: int | torch.Tensor,
        extra: Mapping[str, Any] | None = None,
    ) -> Any:
        """The model's forward; ``rows``: PEFT's ``adapter_names``, ``plan``'s hooks
        installed; ``cache`` None: none is used or kept."""
        model = self._state.model
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": cache is not None,
            **(extra or {}),
        }
        peft = is_peft_model(model)
        keeps_last, cache_name = self._signature(peft_base_model(model))
        if cache is not None:
            kwargs[cache_name] = cache
        if keeps_last:
            kwargs["logits_to_keep"] = keep
        if peft:
            kwargs["adapter_names"] = rows
        try:
            with plan.installed() if plan is not None else contextlib.nullcontext():
                return model(**kwargs)
        except BaseException:
            if peft:
                # PEFT installs per-forward ``adapter_names`` hooks and removes them only
                # when the forward returns: after a fault they would pile up on every layer.
                dropped = drop_leaked_forward_hooks(model)
                if dropped:
                    _log.debug("removed %d PEFT hooks a failed forward left behind", dropped)
            raise

    def _plan(self, names: tuple[str, ...]) -> FusedPlan | None:
        """The fused plan of rows on ``names`` (kept per composition, most recent last)."""
        if all(n == BASE_ADAPTER for n in names) or not is_peft_model(self._state.model):
            return None
        if names in self._plans:
            plan = self._plans[names] = self._plans.pop(names)
            return plan
        try:
            plan = self._adapters()._fused_plan_on_worker(names)
        except Exception:
            # A PEFT change the fused path does not know: serve with PEFT's own loop.
            if not self._plan_failed:
                _log.warning(
                    "the fused LoRA plan failed; serving mixed adapters with PEFT's loop",
                    exc_info=True,
                )
                self._plan_failed = True
            plan = None
        while len(self._plans) >= _PLANS_KEPT:
            self._plans.pop(next(iter(self._plans)))
        self._plans[names] = plan
        return plan

    def _signature(self, base: Any) -> tuple[bool, str]:
        """``forward_arguments`` of ``base``'s class, read once per class."""
        kind = type(base)
        known = self._signatures.get(kind)
        if known is None:
            known = self._signatures[kind] = forward_arguments(kind)
        return known
