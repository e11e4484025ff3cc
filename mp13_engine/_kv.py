# SPDX-License-Identifier: Apache-2.0
"""``BatchKV``: the attention KV cache of a batch of rows that join and leave.

Concept
    One ``transformers`` ``DynamicCache`` whose layers are all plain
    ``DynamicLayer`` (keys and values of shape ``(rows, heads, columns, dim)``),
    plus each row's length: how many of its tokens the cache holds. Rows are
    *right-aligned*: row ``i``'s tokens fill the last ``lens[i]`` columns with no
    gap, and the columns before them are padding that the attention mask hides.
    So the 2D attention mask and the position ids follow from ``lens`` alone
    (:meth:`inputs`), and the model's own attention (eager, sdpa, ...) and mask
    functions run unchanged, as for a left-padded ``generate`` batch.

    * A row *joins* (:meth:`join`) by padding the shorter of the two caches on
      the left to the same number of columns and concatenating the batches.
    * Rows *leave* (:meth:`select`): the kept rows are copied without the
      columns no remaining row uses any more (cut from the left), so a long
      row that finished stops costing memory and attention at once.
    * A decode step appends one column per layer *in place*, into spare
      columns of buffers the cache layer owns (``_compat.kv_cache``): the
      plain ``DynamicLayer`` concatenates into new tensors at every step, a
      large part of a batched decode step on CPU.
    * A forward that fails half-way has appended KV to some layers only:
      :meth:`lengths` / :meth:`rollback` cut every layer back (appends write
      only past the columns handed out, so the old columns are untouched).

Why full layers for sliding-window models
    ``DynamicSlidingWindowLayer`` drops old columns by a count shared by the
    whole batch, which rows of different lengths cannot share. The model's
    mask functions apply the window themselves (on column distances, which
    equal token distances because rows have no gaps), so full layers give the
    same attention; the price is memory beyond the window for long rows.
    Layers that keep anything but attention KV (recurrent states, KV shared
    between layers, indexers), and chunked attention (whose chunks are counted
    in columns, which padding shifts), cannot be padded or joined:
    :func:`check_supported` refuses such models with a clear error.

Invariants: every layer has the same number of columns ``width``; ``width ==
max(lens)`` (0 when empty) after every operation except a forward, whose
caller updates ``lens`` (:meth:`advance`); worker thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from mp13_engine._compat import (
    cache_layer_types,
    kv_cache,
    kv_cache_joined,
    kv_layers,
    layer_kv,
    set_layer_kv,
)
from mp13_engine._errors import ModelLoadError

if TYPE_CHECKING:
    from mp13_engine._prefix_cache import PrefixHit

#: Cache layer kinds (``_compat.cache_layer_types``) that rows can share padded. Not
#: ``chunked_attention``: its mask groups columns into chunks, and left padding would shift
#: a padded row's chunk boundaries.
_ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


def check_supported(config: Any) -> None:
    """Raise ``ModelLoadError`` for a model whose cache layers are not plain attention KV."""
    types = cache_layer_types(config)
    if types is None:
        return  # an unusual config: let the first forward show whether it works
    odd = sorted({t for t in types if t not in _ATTENTION_LAYER_TYPES})
    if odd:
        raise ModelLoadError(
            f"this model has cache layers of type {', '.join(odd)}; mp13's step loop batches "
            "rows by padding their attention keys and values on the left, which layers with a "
            "recurrent or shared state or chunked attention cannot be. Use a model with only "
            "full or sliding-window attention."
        )


Tensors = tuple[torch.Tensor, torch.Tensor]


def _kv(layer: Any) -> Tensors | None:
    return layer_kv(layer)


def _full(layer: Any) -> Tensors:
    """A layer's keys and values; every layer holds some once a forward ran."""
    kv = layer_kv(layer)
    if kv is None:
        raise RuntimeError("a cache layer holds no keys yet; run a forward on the batch first")
    return kv


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return t
    shape = list(t.shape)
    shape[2] = n
    return torch.cat([t.new_zeros(shape), t], dim=2)


class BatchKV:
    """The KV cache of a batch of right-aligned rows (see the module docstring)."""

    __slots__ = ("_mask", "_next_mask", "cache", "lens")

    def __init__(self, cache: Any = None, lens: Sequence[int] = ()):
        self.cache = cache if cache is not None else kv_cache()
        self.lens: list[int] = list(lens)
        self._mask: torch.Tensor | None = None  # the mask of ``lens`` (kept across decode steps)
        self._next_mask: torch.Tensor | None = None  # the mask ``inputs`` handed out last

    # ----- shape
    @property
    def rows(self) -> int:
        return len(self.lens)

    @property
    def width(self) -> int:
        """Columns in the cache (the longest row's length)."""
        layers = kv_layers(self.cache)
        kv = _kv(layers[0]) if layers else None
        return 0 if kv is None else int(kv[0].shape[2])

    def nbytes(self) -> int:
        """Bytes held by the keys and values of every layer."""
        total = 0
        for layer in kv_layers(self.cache):
            kv = _kv(layer)
            if kv is not None:
                total += sum(t.numel() * t.element_size() for t in kv)
        return total

    # ----- forward inputs
    def inputs(self, new: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask and position ids for a forward adding ``new[i]`` tokens to row ``i``.

        The forward's input is ``max(new)`` columns wide; row ``i``'s tokens are
        its last ``new[i]`` columns (a row that already holds tokens must fill
        every column, so that no gap opens between its old and new tokens).
        """
        width = max(new)
        mask = self._mask
        if width == 1 and min(new) == 1 and mask is not None and mask.device == device:
            # A decode step: every row gets one token, the mask grows by a column of ones.
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            pos = torch.tensor(self.lens, device=device).unsqueeze(1)
            self._next_mask = mask
            return mask, pos
        total = self.width + width
        after = torch.tensor([n + k for n, k in zip(self.lens, new, strict=True)], device=device)
        cols = torch.arange(total, device=device)
        mask = (cols.unsqueeze(0) >= (total - after).unsqueeze(1)).long()
        # Column j of the input holds token number lens[i] + new[i] - width + j of row i.
        offset = after - width
        pos = (torch.arange(width, device=device).unsqueeze(0) + offset.unsqueeze(1)).clamp(min=0)
        self._next_mask = mask
        return mask, pos

    def advance(self, new: Sequence[int]) -> None:
        """Record a successful forward that added ``new[i]`` tokens to row ``i``."""
        self.lens = [n + k for n, k in zip(self.lens, new, strict=True)]
        self._mask, self._next_mask = self._next_mask, None
        self._trim()

    # ----- failure recovery
    def lengths(self) -> list[int]:
        out = []
        for layer in kv_layers(self.cache):
            kv = _kv(layer)
            out.append(-1 if kv is None else int(kv[0].shape[2]))
        return out

    def rollback(self, lengths: list[int]) -> None:
        """Undo what a failed forward appended (layers it added, columns it added)."""
        layers = kv_layers(self.cache)
        del layers[len(lengths) :]
        for layer, n in zip(layers, lengths, strict=True):
            kv = _kv(layer)
            if n < 0:
                set_layer_kv(layer, None, None)
            elif kv is not None and kv[0].shape[2] > n:
                set_layer_kv(layer, kv[0][:, :, :n], kv[1][:, :, :n])

    # ----- rows joining and leaving
    def join(self, other: BatchKV) -> None:
        """Append ``other``'s rows after this batch's rows (``other`` is consumed)."""
        if other.rows == 0:
            return
        if self.rows == 0:
            self.cache, self.lens, self._mask = other.cache, list(other.lens), other._mask
            return
        self.cache = _concat([self, other])
        self.lens = self.lens + other.lens
        self._mask = None

    def select(self, keep: Sequence[int]) -> None:
        """Keep only rows ``keep`` (in that order) and cut columns nobody uses any more."""
        if len(keep) == self.rows and list(keep) == list(range(self.rows)):
            return
        self._mask = None
        if not keep:
            self.cache, self.lens = kv_cache(), []
            return
        lens = [self.lens[i] for i in keep]
        if self.width:
            # Columns no kept row uses are cut before the copy, so the new tensors are compact.
            extra = self.width - max(lens)
            index = torch.tensor(list(keep), dtype=torch.long)
            for layer in kv_layers(self.cache):
                kv = _kv(layer)
                if kv is not None:
                    idx = index.to(kv[0].device)
                    keys = kv[0][:, :, extra:].index_select(0, idx)
                    set_layer_kv(layer, keys, kv[1][:, :, extra:].index_select(0, idx))
        self.lens = lens

    def take(self, i: int) -> BatchKV:
        """Row ``i`` alone, as views of this cache (no copy; a forward on it copies)."""
        n = self.lens[i]
        start = self.width - n
        layers = []
        for layer in kv_layers(self.cache):
            k, v = _full(layer)
            layers.append((k[i : i + 1, :, start:], v[i : i + 1, :, start:]))
        return BatchKV(kv_cache(layers), [n])

    def row_layers(self, i: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, row ``i``'s keys and values ``(heads, lens[i], dim)`` (views)."""
        start = self.width - self.lens[i]
        out = []
        for layer in kv_layers(self.cache):
            k, v = _full(layer)
            out.append((k[i, :, start:], v[i, :, start:]))
        return out

    @classmethod
    def from_hit(cls, hit: PrefixHit, coming: int) -> BatchKV:
        """One row holding a prefix-cache hit's keys and values, copied once into buffers
        with room for the ``coming`` tokens of the rest of its prompt."""
        return cls(kv_cache_joined(hit.blocks, coming), [hit.tokens])

    @classmethod
    def concat(cls, parts: Sequence[BatchKV]) -> BatchKV:
        """The rows of ``parts`` in order, as one batch."""
        parts = [p for p in parts if p.rows]
        if not parts:
            return cls()
        if len(parts) == 1:
            return parts[0]
        return cls(_concat(parts), [n for p in parts for n in p.lens])

    def _trim(self) -> None:
        extra = self.width - max(self.lens, default=0)
        if extra > 0:
            if self._mask is not None:
                self._mask = self._mask[:, extra:]
            for layer in kv_layers(self.cache):
                kv = _kv(layer)
                if kv is not None:
                    set_layer_kv(layer, kv[0][:, :, extra:], kv[1][:, :, extra:])


def _concat(parts: Sequence[BatchKV]) -> Any:
    width = max(p.width for p in parts)
    layers = []
    for per_layer in zip(*(kv_layers(p.cache) for p in parts), strict=True):
        kvs = [_full(layer) for layer in per_layer]
        keys = torch.cat([_pad_left(k, width - k.shape[2]) for k, _ in kvs], 0)
        values = torch.cat([_pad_left(v, width - v.shape[2]) for _, v in kvs], 0)
        layers.append((keys, values))
    return kv_cache(layers)
