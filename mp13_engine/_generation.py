# SPDX-License-Identifier: Apache-2.0
"""One wave: a single HF ``generate`` call over a left-padded batch of requests.

``generate`` runs in greedy mode. Each row's own parameters are applied by two
hooks that HF calls every decode step:

- ``RowSampler`` (a LogitsProcessor) applies per-row repetition penalty,
  temperature, top-k, top-p and samples with the row's own seeded
  ``torch.Generator``, then leaves only the chosen token finite, so the greedy
  argmax picks it; it also suppresses EOS for rows below ``min_new_tokens``.
  Greedy rows are untouched, and the processor is not installed at all when no
  row needs it.
- ``RowController`` (a StoppingCriteria returning a per-row bool tensor) hands
  each row's new token to its ``RequestState`` and ends rows: EOS, the state's
  verdict (``append`` is True on a completed stop string or a pending cancel,
  so a cancelled row is resolved at the next step), or its own
  ``max_new_tokens``. Each end is one ``state.finish(reason)``. HF ANDs those
  flags into its ``unfinished_sequences`` and ends ``generate`` when every row
  is done.

Invariant: a request's greedy tokens are the same alone or in a wave (left
padding plus attention mask; HF derives position ids from the mask), and a
seeded sampled request draws the same tokens alone or in a wave (its generator
is private to its row).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessor, StoppingCriteria

from mp13_engine._streams import RequestState
from mp13_engine._types import FinishReason

_NEG_INF = float("-inf")


class Row:
    """Per-row decoding parameters and progress inside one wave."""

    __slots__ = (
        "do_sample",
        "done",
        "generator",
        "max_new",
        "min_new",
        "n",
        "pad",
        "penalty",
        "state",
        "temperature",
        "top_k",
        "top_p",
    )

    def __init__(self, state: RequestState, pad: int):
        req = state.request
        self.state = state
        self.pad = pad
        self.n = 0
        self.done = False
        self.max_new = state.max_new_tokens
        self.min_new = min(req.min_new_tokens, self.max_new)
        self.do_sample = req.do_sample
        self.temperature = req.temperature
        self.top_k = req.top_k
        self.top_p = req.top_p
        self.penalty = req.repetition_penalty
        self.generator: torch.Generator | None = None
        if req.do_sample:
            seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(8), "little")
            # On the CPU whatever the model's device: a seed draws the same numbers on any
            # device, and the logits of a model spread over devices may sit anywhere.
            self.generator = torch.Generator()
            self.generator.manual_seed(seed)

    @property
    def needs_processing(self) -> bool:
        return self.do_sample or self.penalty != 1.0 or self.min_new > 0


class RowSampler(LogitsProcessor):
    """Per-row sampling and EOS suppression (see module docstring)."""

    def __init__(self, rows: list[Row], eos_ids: list[int], device: torch.device):
        self.rows = rows
        self.eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
        self.device = device

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.eos.device != scores.device:  # a model spread over devices: logits on its last
            self.eos = self.eos.to(scores.device)
        suppress = [i for i, r in enumerate(self.rows) if not r.done and r.n < r.min_new]
        if suppress and self.eos.numel():
            idx = torch.tensor(suppress, dtype=torch.long, device=scores.device)
            scores[idx.unsqueeze(1), self.eos.unsqueeze(0)] = _NEG_INF
        for i, row in enumerate(self.rows):
            if row.done or row.penalty == 1.0:
                continue
            # repetition penalty over the row's own tokens (never its left padding)
            seen = input_ids[i, row.pad :].to(scores.device)
            vals = scores[i].gather(0, seen)
            vals = torch.where(vals < 0, vals * row.penalty, vals / row.penalty)
            scores[i] = scores[i].scatter(0, seen, vals)
        sampled = [i for i, r in enumerate(self.rows) if not r.done and r.do_sample]
        if sampled:
            self._sample(scores, sampled)
        return scores

    def _sample(self, scores: torch.FloatTensor, sampled: list[int]) -> None:
        """Sample the ``sampled`` rows at once; each row draws from its own generator.

        All ops are row-wise, so a row's draw does not depend on its neighbours:
        the same seed gives the same token alone or in a wave.
        """
        rows = [self.rows[i] for i in sampled]
        dev = scores.device
        idx = torch.tensor(sampled, dtype=torch.long, device=dev)
        temps = torch.tensor([max(r.temperature, 1e-5) for r in rows], device=dev)
        logits = scores.index_select(0, idx) / temps.unsqueeze(1)
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        vocab = sorted_logits.shape[-1]
        if any(r.top_k and r.top_k < vocab for r in rows):
            ks = torch.tensor([r.top_k if r.top_k else vocab for r in rows], device=dev)
            ranks = torch.arange(vocab, device=dev).unsqueeze(0)
            sorted_logits = sorted_logits.masked_fill(ranks >= ks.unsqueeze(1), _NEG_INF)
        if any(r.top_p < 1.0 for r in rows):
            ps = torch.tensor([r.top_p for r in rows], device=dev).unsqueeze(1)
            probs = sorted_logits.softmax(-1)
            # keep the smallest prefix whose mass reaches top_p (the crossing token stays)
            drop = (probs.cumsum(-1) - probs) >= ps
            sorted_logits = sorted_logits.masked_fill(drop, _NEG_INF)
        cdf = sorted_logits.softmax(-1).cumsum(-1)
        draws = torch.cat([torch.rand(1, generator=r.generator) for r in rows]).to(dev)
        pick = torch.searchsorted(cdf, (draws * cdf[:, -1]).unsqueeze(1)).clamp_(max=vocab - 1)
        tokens = order.gather(1, pick)
        chosen = torch.full((len(rows), scores.shape[-1]), _NEG_INF, device=dev)
        chosen.scatter_(1, tokens, 0.0)
        scores.index_copy_(0, idx, chosen.to(scores.dtype))


class RowController(StoppingCriteria):
    """Per-step hook: hand each row its token and end the rows that are done."""

    def __init__(self, rows: list[Row], eos_ids: set[int], device: torch.device):
        self.rows = rows
        self.eos_ids = eos_ids
        self.device = device
        self._flags = torch.zeros(len(rows), dtype=torch.bool, device=device)

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        last = input_ids[:, -1].tolist()
        changed = False
        for i, row in enumerate(self.rows):
            if row.done:
                continue
            tok = last[i]
            st = row.state
            if tok in self.eos_ids:
                reason = FinishReason.STOP
            else:
                row.n += 1
                if st.append(tok):  # a stop string completed, or a cancel is pending
                    reason = FinishReason.STOP
                elif row.n >= row.max_new:
                    reason = FinishReason.LENGTH
                else:
                    continue
            row.done = True
            st.finish(reason)
            changed = True
        if changed:
            self._flags = torch.tensor([r.done for r in self.rows], device=self.device)
        return self._flags


def left_pad(
    prompts: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Left-padded ``input_ids``, ``attention_mask`` and each row's pad length."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    pads = []
    for i, p in enumerate(prompts):
        pad = width - len(p)
        pads.append(pad)
        if p:
            ids[i, pad:] = torch.tensor(p, dtype=torch.long)
            mask[i, pad:] = 1
    return ids.to(device), mask.to(device), pads


def greedy_config(max_new_tokens: int, pad_id: int, eos_ids: list[int]) -> GenerationConfig:
    """A greedy config that overrides every sampling default the checkpoint may ship.

    HF fills ``None`` fields from ``model.generation_config``; setting them
    explicitly keeps a checkpoint's ``do_sample=True`` / ``repetition_penalty``
    from leaking into the engine's per-row control.
    """
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=False,
        num_beams=1,
        temperature=1.0,
        top_k=50,
        top_p=1.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        pad_token_id=pad_id,
        eos_token_id=eos_ids or None,
        use_cache=True,
    )
