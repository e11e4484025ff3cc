# SPDX-License-Identifier: Apache-2.0
"""Fused mixed-adapter LoRA: a batch that mixes adapters costs a few matmuls per layer.

Concept
    PEFT serves a batch that mixes adapters (``generate(adapter_names=[...])``)
    by looping, inside every LoRA layer, over the batch's adapters: gather that
    adapter's rows, two small matmuls, scatter the result back. On narrow models
    (and at decode, where each step is tiny) that per-layer Python loop costs
    more than the arithmetic. A :class:`FusedPlan` instead concatenates, per
    LoRA layer, the ``A`` matrices of the batch's adapters (``R`` = the sum of
    their ranks) and their ``B`` matrices, and gives every row a weight over
    the ``R`` columns, the adapter's scaling on its own columns and 0 elsewhere::

        delta = ((x @ A_catᵀ) * row_weights) @ B_catᵀ

    Mathematically this is PEFT's ``B(A(x)) * scaling`` row by row (rows on
    ``__base__`` get exactly zero); numerically it agrees to float rounding.

How it plugs in (public extension points only, no patching)
    The forward still goes through PEFT's own mixed-batch API, with every row on
    ``__base__``, so PEFT adds no LoRA delta and no global adapter state
    (``set_adapter``, ``disable_adapter``, ``requires_grad``) changes. For the
    forward only, :meth:`FusedPlan.installed` puts a ``torch`` forward hook on each
    LoRA layer that adds the fused delta to the layer's output, and removes the
    hooks when the forward ends, however it ends. The step loop keeps a plan
    while its batch's rows stay the same and makes a new one when rows join or
    leave (the per-row weights change then).

Packed forwards (``_packed``)
    A packed forward lays several batches' tokens side by side in one input
    row, so rows cannot be told apart by batch index. :meth:`FusedPlan.spread`
    turns a plan's ``(rows, R)`` weights into ``(1, tokens, R)`` weights, each
    row's line repeated once per token it has in the packed row; the delta is
    then computed per token, and rows on different adapters share the forward.

When it does not apply (:meth:`FusedLora.plan` returns None; PEFT's loop serves the batch)
    * no row uses an adapter;
    * a module holds one of the batch's adapters in a form other than plain
      linear LoRA: an adapter variant (DoRA, aLoRA, ...), LoRA on an embedding
      or convolution, a bias on ``lora_B``, weights merged into the base,
      ``modules_to_save`` or trainable tokens;
    * the batch's adapters add up to more than :data:`MAX_FUSED_RANK` columns in
      one layer, where computing every adapter for every row would cost more
      than PEFT's gathers.

Worker thread only: a plan holds its batch's row order and serves forwards
of exactly that batch.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import torch
from torch.nn import functional

from mp13_engine._compat import (
    TunerModules,
    holds_adapter,
    is_plain_linear_lora,
    lora_names,
    lora_scaling,
    lora_weights,
    peft_adapter_names,
    peft_tuner_modules,
    tensor_version,
)
from mp13_engine._types import adapter_names

MAX_FUSED_RANK = 512
"""Most LoRA columns (sum of the batch's ranks) one fused layer computes for every row."""


@attrs.frozen
class _LayerPlan:
    """The fused weights of one LoRA layer for one batch."""

    module: Any
    a_cat: torch.Tensor  # (R, in)
    b_cat: torch.Tensor  # (out, R)
    # (rows, R): scaling on each row's own columns, else 0; (1, tokens, R) once spread
    row_weights: torch.Tensor | float

    def hook(self, module: Any, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        rows = self.row_weights
        if isinstance(rows, torch.Tensor) and rows.dim() == 3:  # spread: one line per token
            if x.shape[:-1] != rows.shape[:-1]:
                raise RuntimeError(
                    f"fused LoRA plan was spread over {rows.shape[1]} packed tokens but the "
                    f"layer got an input of shape {tuple(x.shape)}"
                )
        elif isinstance(rows, torch.Tensor):
            if x.shape[0] != rows.shape[0]:
                raise RuntimeError(
                    f"fused LoRA plan was made for {rows.shape[0]} rows but the layer got a "
                    f"batch of {x.shape[0]}; this batch cannot use the fused path"
                )
            rows = rows.view(rows.shape[0], *([1] * (x.dim() - 2)), rows.shape[1])
        if x.dtype != self.a_cat.dtype:
            x = x.to(self.a_cat.dtype)
        delta = functional.linear(functional.linear(x, self.a_cat) * rows, self.b_cat)
        return output + delta.to(output.dtype)


@attrs.frozen
class FusedPlan:
    """The fused LoRA weights of every layer a batch's adapters touch."""

    layers: tuple[_LayerPlan, ...]

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Hook every planned layer for the duration of one forward (or one ``generate``)."""
        handles = []
        try:
            for layer in self.layers:
                handles.append(layer.module.register_forward_hook(layer.hook))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def spread(self, tokens: torch.Tensor) -> FusedPlan:
        """This plan for one packed input row where row ``i`` has ``tokens[i]`` tokens.

        Each row's weights are repeated once per token, in row order, as
        ``(1, sum(tokens), R)``; layers that shared a row table share the spread one.
        """
        spread: dict[int, torch.Tensor] = {}
        layers = []
        for layer in self.layers:
            weights = layer.row_weights
            if isinstance(weights, torch.Tensor):
                if weights.dim() != 2 or weights.shape[0] != tokens.shape[0]:
                    raise ValueError(
                        f"a plan for {weights.shape[0]} rows cannot be spread over "
                        f"{tokens.shape[0]} rows"
                    )
                key = id(weights)
                if key not in spread:
                    counts = tokens.to(weights.device)
                    spread[key] = weights.repeat_interleave(counts, dim=0).unsqueeze(0)
                weights = spread[key]
            layers.append(attrs.evolve(layer, row_weights=weights))
        return FusedPlan(tuple(layers))


@attrs.frozen
class _Concat:
    """One layer's A and B matrices of a set of adapters, concatenated, and what they came from."""

    a_cat: torch.Tensor
    b_cat: torch.Tensor
    sources: tuple[weakref.ref[torch.Tensor], ...]
    versions: tuple[int, ...]

    def is_fresh(self) -> bool:
        """Whether every source tensor is alive and unchanged since the copy was made.

        ``tensor_version`` is torch's in-place modification counter (an optimizer
        step bumps it). Replaced adapters are caught by :meth:`FusedLora.invalidate`.
        """
        for ref, version in zip(self.sources, self.versions, strict=True):
            source = ref()
            if source is None or tensor_version(source) != version:
                return False
        return True


@attrs.frozen
class _Slot:
    """One layer as one set of adapters sees it: the names it holds, their ranks, scalings."""

    index: int
    layer: Any
    names: tuple[str, ...]
    ranks: tuple[int, ...]
    scalings: tuple[float, ...]


@attrs.define
class _SetCache:
    """What one set of adapters needs on every batch: its layout (None = not fusable), copies."""

    layout: tuple[_Slot, ...] | None
    concat: dict[int, _Concat] = attrs.field(factory=dict)


class FusedLora:
    """Per-engine state of the fused path; worker thread only.

    Finds the model's tuner modules once per model and set of adapters, and
    keeps, for the last ``max_sets`` sets of adapters, which layers they touch
    and their concatenated weights, so a repeated mix costs no copies. Copies
    are checked against their source tensors' in-place versions on every use,
    so an adapter trained in place is never served stale; the adapter manager
    calls :meth:`invalidate` whenever it deletes an adapter, so a name that is
    unloaded and loaded again never reaches old weights.
    """

    def __init__(self, max_sets: int = 4) -> None:
        self._max_sets = max_sets
        self._model: weakref.ref[Any] | None = None
        self._key: frozenset[str] = frozenset()
        self._found = TunerModules((), ())
        self._sets: OrderedDict[tuple[str, ...], _SetCache] = OrderedDict()

    def invalidate(self) -> None:
        """Forget the modules and weights found so far (adapters were added or removed)."""
        self._model = None
        self._sets.clear()

    def modules(self, model: Any) -> TunerModules:
        """The model's LoRA layers and other adapter-holding modules (cached)."""
        key = peft_adapter_names(model)
        if self._model is None or self._model() is not model or self._key != key:
            self._found = peft_tuner_modules(model)
            self._model, self._key = weakref.ref(model), key
            self._sets.clear()
        return self._found

    def plan(self, model: Any, row_names: Sequence[str]) -> FusedPlan | None:
        """A fused plan for a batch whose rows use ``row_names`` (one PEFT name per row).

        None when no row uses an adapter or when the batch cannot be fused (see
        the module docstring); the caller then serves the batch with PEFT's loop.
        """
        wanted = tuple(sorted(adapter_names(row_names)))
        if not wanted:
            return None
        found = self.modules(model)
        cached = self._sets.pop(wanted, None)
        if cached is None:
            cached = _SetCache(_layout(found, wanted))
        self._sets[wanted] = cached  # most recently used last
        while len(self._sets) > self._max_sets:
            self._sets.popitem(last=False)
        if not cached.layout:
            return None
        row_weights: dict[Any, torch.Tensor | float] = {}
        planned = []
        with torch.no_grad():
            for slot in cached.layout:
                cat = _concatenated(slot, cached.concat)
                key = (slot.names, slot.ranks, slot.scalings, cat.a_cat.device, cat.a_cat.dtype)
                if key not in row_weights:
                    row_weights[key] = _row_weights(row_names, slot, cat.a_cat)
                planned.append(_LayerPlan(slot.layer, cat.a_cat, cat.b_cat, row_weights[key]))
        return FusedPlan(tuple(planned))


def _layout(found: TunerModules, wanted: tuple[str, ...]) -> tuple[_Slot, ...] | None:
    """The layers a set of adapters touches; None when one of them cannot be fused."""
    if any(holds_adapter(m, n) for m in found.others for n in wanted):
        return None
    slots = []
    for index, layer in enumerate(found.lora):
        linear = lora_names(layer)
        names = tuple(n for n in wanted if n in linear)
        if any(holds_adapter(layer, n) for n in wanted if n not in names):
            return None  # an adapter kept here in another form (embedding LoRA, ...)
        if not names:
            continue
        if not all(is_plain_linear_lora(layer, n) for n in names):
            return None
        ranks = tuple(int(lora_weights(layer, n)[0].shape[0]) for n in names)
        if sum(ranks) > MAX_FUSED_RANK:
            return None
        scalings = tuple(lora_scaling(layer, n) for n in names)
        slots.append(_Slot(index, layer, names, ranks, scalings))
    return tuple(slots) or None


def _concatenated(slot: _Slot, cache: dict[int, _Concat]) -> _Concat:
    cached = cache.get(slot.index)
    if cached is not None and cached.is_fresh():
        return cached
    weights = [lora_weights(slot.layer, n) for n in slot.names]
    a_parts = [a for a, _ in weights]
    b_parts = [b for _, b in weights]
    if len(a_parts) == 1:  # nothing to copy: the live weights themselves
        made = _Concat(a_parts[0], b_parts[0], (), ())
    else:
        sources = a_parts + b_parts
        made = _Concat(
            torch.cat(a_parts, 0),
            torch.cat(b_parts, 1),
            tuple(weakref.ref(w) for w in sources),
            tuple(tensor_version(w) for w in sources),
        )
    cache[slot.index] = made
    return made


def _row_weights(row_names: Sequence[str], slot: _Slot, like: torch.Tensor) -> torch.Tensor | float:
    """Per row and column: the adapter's scaling on the row's own adapter's columns, else 0."""
    names = slot.names
    if len(names) == 1 and all(n == names[0] for n in row_names):
        return slot.scalings[0]
    table = []
    for row in row_names:
        line: list[float] = []
        for name, rank, scaling in zip(names, slot.ranks, slot.scalings, strict=True):
            line.extend([scaling if name == row else 0.0] * rank)
        table.append(line)
    return torch.tensor(table, dtype=like.dtype, device=like.device)
