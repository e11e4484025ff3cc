# SPDX-License-Identifier: Apache-2.0
"""``PackedCache``: one forward over several batches of rows at once.

Concept
    A step of the loop may have several batches to compute: the running rows
    (one token each) and a chunk of the prompts of one or more prefill groups,
    each batch with its own right-aligned ``BatchKV``. One forward per batch
    reads every weight of the model once per batch; at the batch sizes a step
    has, a forward on a CPU is mostly that read, so a step in which a prompt
    arrived cost about two decode steps. Packed, the batches' tokens lie side
    by side along the sequence axis of a single input row (row-major within a
    batch), each token with its own position id, so the embedding, the linear
    layers and the norms run once for all of them.

    Only attention has to tell the batches apart. The forward runs under an
    attention implementation registered with transformers' ``AttentionInterface``
    (``ATTENTION``): the model hands each layer's new keys and values to
    :meth:`PackedCache.update`, which appends each batch's slice to that batch's
    own cache layer; :func:`packed_attention` then computes each batch's
    attention with ``scaled_dot_product_attention`` over that batch's keys,
    under the mask its rows' lengths give (left padding, causal order, the
    model's sliding window), and lays the outputs back side by side. Logits
    are computed only where a token is sampled (``logits_to_keep`` as indices).
    Why not transformers' own packed-sequence support: it packs rows into one
    sequence *without* a cache per row, and its paged cache cannot hold a row
    per LoRA adapter (see ``_loop``).

Rows on different adapters pack when the fused LoRA path serves them: its
per-row weights are spread over the rows' tokens (``FusedPlan.spread``).

When the loop does not pack (each batch gets its own forward, as before)
    * rows on different adapters that the fused path does not serve (PEFT's
      per-row ``adapter_names`` tells rows apart by batch row, and a packed
      input has one), and groups being retried unfused after a fault;
    * a model whose attention does something the function here does not
      (logit soft-capping, attention sinks, dropout), or that does not send each
      layer's attention through transformers' interface right after updating
      the cache: :class:`PackingUnsupported` is raised during or after the
      forward (the loop rolls the caches back) and the loop stops packing for
      that model.

Invariants: each batch's cache gains exactly the columns its own forward would
give it, with the same values up to float rounding; no row attends to another
row's keys; worker thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from mp13_engine._kv import BatchKV

#: The name the attention function is registered under (``_compat.packed_attention_name``).
ATTENTION = "mp13_packed"
#: The forward keyword that carries the ``PackedCache`` down to the attention function.
PACK_KWARG = "mp13_packed_cache"

#: Attention keywords that change the result and that ``packed_attention`` cannot honour.
_UNSUPPORTED = ("softcap", "s_aux", "sinks")


class PackingUnsupported(Exception):
    """The model's attention cannot run packed (internal: the loop stops packing)."""


class Part:
    """One batch in a packed forward: ``new[i]`` tokens for row ``i`` of ``kv``."""

    __slots__ = ("ids", "kv", "new", "sample")

    def __init__(self, kv: BatchKV, ids: torch.Tensor, new: list[int], sample: bool):
        self.kv = kv
        self.ids = ids  # (rows, width): row i's tokens are its last new[i] columns
        self.new = new
        self.sample = sample  # whether the forward returns each row's last logits

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def width(self) -> int:
        return int(self.ids.shape[1])


class PackedCache:
    """The cache object a packed forward is handed (see the module docstring)."""

    def __init__(self, parts: Sequence[Part], device: torch.device):
        self.parts = list(parts)
        ids: list[torch.Tensor] = []
        pos: list[torch.Tensor] = []
        keep: list[int] = []
        self._masks: list[torch.Tensor] = []  # per part: (rows, 1, width, columns) bool
        self._windowed: dict[tuple[int, int], torch.Tensor] = {}  # (part, window): mask
        self._spans: list[tuple[int, int]] = []
        at = 0
        for part in self.parts:
            mask, positions = part.kv.inputs(part.new, device)
            old = int(mask.shape[1]) - part.width  # columns before this forward
            cols = torch.arange(int(mask.shape[1]), device=device).view(1, 1, -1)
            own = (old + torch.arange(part.width, device=device)).view(1, -1, 1)
            # Each query sees its row's tokens up to itself; a query on left padding sees
            # only its own column, so no query row is all masked (softmax of nothing is NaN).
            seen = (mask.bool().unsqueeze(1) & (cols <= own)) | (cols == own)
            self._masks.append(seen.unsqueeze(1))
            n = part.rows * part.width
            self._spans.append((at, at + n))
            ids.append(part.ids.reshape(-1))
            pos.append(positions.reshape(-1))
            if part.sample:
                keep.extend(at + (i + 1) * part.width - 1 for i in range(part.rows))
            at += n
        self.input_ids = torch.cat(ids).to(device).unsqueeze(0)
        self.position_ids = torch.cat(pos).to(device).unsqueeze(0)
        self.keep = torch.tensor(keep, dtype=torch.long, device=device)
        self._current: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._layer = -1
        self.updates = 0
        self.attended = 0

    def row_tokens(self) -> torch.Tensor:
        """Tokens each row has in the packed input, rows in part order (what a fused LoRA
        plan is spread by)."""
        return torch.tensor([p.width for p in self.parts for _ in range(p.rows)])

    # ----- what the model calls
    def update(
        self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append each part's slice of ``(1, heads, tokens, dim)`` to its own cache layer."""
        current = []
        for part, (a, b) in zip(self.parts, self._spans, strict=True):
            k = keys[0, :, a:b].unflatten(1, (part.rows, part.width)).transpose(0, 1)
            v = values[0, :, a:b].unflatten(1, (part.rows, part.width)).transpose(0, 1)
            current.append(part.kv.cache.update(k, v, layer_idx))
        self._current, self._layer = current, layer_idx
        self.updates += 1
        return keys, values  # the attention function reads ``_current``, not these

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # position ids are always given; nothing reads this for masks

    # ----- what the attention function calls
    def attend(
        self, layer: int, query: torch.Tensor, scaling: float | None, window: int | None
    ) -> torch.Tensor:
        """Each part's attention over its own keys: ``(1, tokens, heads, dim)``."""
        if layer != self._layer:
            raise PackingUnsupported(f"layer {layer} attended without updating the cache first")
        outs = []
        for i, (part, (a, b), (keys, values)) in enumerate(
            zip(self.parts, self._spans, self._current, strict=True)
        ):
            q = query[0, :, a:b].unflatten(1, (part.rows, part.width)).transpose(0, 1)
            mask = self._mask(i, window, q.device)
            gqa = keys.shape[1] != q.shape[1]
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=scaling, enable_gqa=gqa
            )
            outs.append(out.transpose(1, 2).reshape(1, b - a, out.shape[1], out.shape[3]))
        self.attended += 1
        return torch.cat(outs, dim=1)

    def check(self) -> None:
        """After the forward: every layer that updated the cache attended through here."""
        if self.updates == 0 or self.attended != self.updates:
            raise PackingUnsupported(
                f"{self.updates} cache updates but {self.attended} packed attention calls: the "
                "model computes attention outside transformers' attention interface"
            )

    def _mask(self, i: int, window: int | None, device: torch.device) -> torch.Tensor:
        mask = self._masks[i]
        if window is not None and (i, window) in self._windowed:
            mask = self._windowed[i, window]
        elif window is not None:
            # transformers' sliding window: a key at most ``window - 1`` tokens back. Columns
            # are token distances within a row (a row's tokens have no gaps).
            width, cols = int(mask.shape[2]), int(mask.shape[3])
            own = (cols - width + torch.arange(width, device=mask.device)).view(1, 1, -1, 1)
            col = torch.arange(cols, device=mask.device).view(1, 1, 1, -1)
            mask = self._windowed[i, window] = mask & ((col > own - window) | (col == own))
        return mask.to(device)


def packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The attention function registered as ``ATTENTION`` (transformers' signature)."""
    cache = kwargs.get(PACK_KWARG)
    if not isinstance(cache, PackedCache):
        raise PackingUnsupported("the model does not pass forward keywords down to attention")
    odd = [name for name in _UNSUPPORTED if kwargs.get(name) is not None]
    if odd or dropout or not getattr(module, "is_causal", True):
        raise PackingUnsupported(f"attention with {odd or 'dropout or no causal mask'}")
    window = kwargs.get("sliding_window")
    return cache.attend(int(module.layer_idx), query, scaling, window), None
