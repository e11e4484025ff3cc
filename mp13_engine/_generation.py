# SPDX-License-Identifier: Apache-2.0
"""Per-row token choice: each row of a step picks its next token by its own request's rules.

``Sampling`` holds one row's decoding parameters (from its ``Request``) and
its private ``torch.Generator``; :func:`choose` turns a step's last-position
logits ``(rows, vocab)`` into one token per row:

1. rows whose logits hold NaN or +inf (or no finite value at all) are marked
   *bad*: the caller ends them ``ERROR``; their neighbours are untouched;
2. EOS is suppressed for rows below ``min_new_tokens``;
3. repetition penalty over the row's own tokens (prompt and generated; never
   padding), kept as a per-row presence mask over the vocabulary;
4. greedy rows take the argmax; sampled rows apply temperature, top-k and
   top-p (:func:`warp`) and draw with their own generator.

Only the request's parameters apply: a checkpoint's ``generation_config``
(sampling defaults, ``suppress_tokens``, ``bad_words_ids``...) does not, as
the engine never calls ``generate``.

Invariants: every operation is row-wise, so a row's token does not depend on
the other rows of the step (a filter a neighbour turns on leaves a row without it
untouched); a greedy row's token is the argmax of its logits (what ``generate``
picks); a sampled row draws from the distribution transformers' warpers leave
(temperature, top-k, top-p, min-p, in that order; ``tests/engine/test_generation.py``
compares them); a seeded row draws one number per step from its own generator,
which lives on the CPU, so the same seed gives the same draws alone, in any
batch and whatever device the logits sit on (and so the same tokens wherever
the model computes the same logits).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch

from mp13_engine._types import Request, TokenLogprob

_NEG_INF = float("-inf")
#: Temperatures are clamped to [_MIN_TEMPERATURE, _MAX_TEMPERATURE] (see ``Sampling``).
_MIN_TEMPERATURE = 1e-5
_MAX_TEMPERATURE = 1e30
#: Repetition penalties are clamped to [1 / _MAX_PENALTY, _MAX_PENALTY] (see ``Sampling``).
_MAX_PENALTY = 1e20


class Sampling:
    """One row's decoding parameters and sampling state."""

    __slots__ = (
        "do_sample",
        "generator",
        "logprobs",
        "max_new",
        "min_new",
        "min_p",
        "penalty",
        "seen",
        "temperature",
        "top_k",
        "top_logprobs",
        "top_p",
    )

    def __init__(self, request: Request, max_new: int):
        self.max_new = max_new
        self.min_new = min(request.min_new_tokens, max_new)
        # The request's resolved decision (temperature 0 = greedy, see ``Request``).
        self.do_sample = request.sampling
        self.logprobs = request.logprobs
        self.top_logprobs = request.top_logprobs
        # Bounded so that dividing float32 logits by it stays finite and meaningful: below
        # _MIN_TEMPERATURE a draw is the argmax anyway; above _MAX_TEMPERATURE the
        # distribution is uniform anyway, and a temperature past float32's range (1e39)
        # would turn a -inf logit (EOS held off by min_new_tokens) into NaN.
        self.temperature = min(
            max(request.sampling_temperature, _MIN_TEMPERATURE), _MAX_TEMPERATURE
        )
        self.top_k = request.top_k
        self.top_p = request.top_p
        self.min_p = request.min_p
        # Bounded for the same reason: a penalty below float32's range (1e-39) made a
        # positive logit +inf, and a sampled row then drew from NaN (always the least
        # likely token); past the bounds the order of the penalised tokens no longer changes.
        self.penalty = min(max(request.repetition_penalty, 1 / _MAX_PENALTY), _MAX_PENALTY)
        self.seen: torch.Tensor | None = None  # (vocab,) bool: tokens the penalty applies to
        self.generator: torch.Generator | None = None
        if self.do_sample:
            seed = request.seed
            if seed is None:
                seed = int.from_bytes(os.urandom(8), "little")
            # On the CPU whatever the model's device: a seed draws the same numbers on any
            # device, and the logits of a model spread over devices may sit anywhere.
            self.generator = torch.Generator()
            self.generator.manual_seed(seed)

    def note(self, tokens: Sequence[int], vocab: int, device: torch.device) -> None:
        """Record tokens the repetition penalty must see (the prompt, then each new token)."""
        if self.seen is None or self.seen.shape[0] != vocab or self.seen.device != device:
            self.seen = torch.zeros(vocab, dtype=torch.bool, device=device)
        idx = torch.tensor([t for t in tokens if 0 <= t < vocab], dtype=torch.long)
        self.seen[idx.to(device)] = True


def bad_rows(logits: torch.Tensor) -> list[bool]:
    """Rows whose logits hold NaN or +inf, or nothing finite (the model broke on them)."""
    finite = torch.isfinite(logits).all(-1).tolist()
    if all(finite):  # the usual case: one pass over the logits
        return [False] * len(finite)
    # -inf alone is a token the model rules out, not a fault
    broken = torch.isnan(logits).any(-1) | torch.isposinf(logits).any(-1)
    broken |= ~torch.isfinite(logits).any(-1)
    return broken.tolist()


def choose(
    logits: torch.Tensor,
    rows: Sequence[Sampling],
    counts: Sequence[int],
    eos: torch.Tensor,
    logprobs: list[TokenLogprob | None] | None = None,
) -> list[int]:
    """One token per row from ``logits`` (float32, ``(rows, vocab)``; modified in place).

    ``counts[i]``: tokens row ``i`` generated so far (for ``min_new_tokens``);
    ``eos``: the end-of-sequence ids. Rows the caller found bad must have been
    replaced by finite values (their token is ignored). ``logprobs``: a list with a
    slot per row, filled for the rows that ask (``Request.logprobs``, see
    :func:`_logprob`) from the distribution each token was chosen from; ``None`` (no
    row asks) costs nothing.
    """
    dev = logits.device
    if eos.device != dev:
        eos = eos.to(dev)
    suppress = [i for i, r in enumerate(rows) if counts[i] < r.min_new]
    if suppress and eos.numel():
        if len(suppress) == len(rows):
            logits.index_fill_(1, eos, _NEG_INF)
        else:
            for i in suppress:
                logits[i].index_fill_(0, eos, _NEG_INF)
    seen_by = {i: r.seen for i, r in enumerate(rows) if r.penalty != 1.0 and r.seen is not None}
    if seen_by:
        penalised = list(seen_by)
        idx = torch.tensor(penalised, dtype=torch.long, device=dev)
        seen = torch.stack([mask.to(dev) for mask in seen_by.values()])
        factor = torch.tensor([rows[i].penalty for i in penalised], device=dev).unsqueeze(1)
        part = logits.index_select(0, idx)
        hit = torch.where(part < 0, part * factor, part / factor)
        logits.index_copy_(0, idx, torch.where(seen, hit, part))
    tokens = logits.argmax(-1)
    sampled = [i for i, r in enumerate(rows) if r.do_sample]
    warped: tuple[torch.Tensor, torch.Tensor] | None = None
    if sampled:
        idx = torch.tensor(sampled, dtype=torch.long, device=dev)
        warped = warp(logits.index_select(0, idx), [rows[i] for i in sampled])
        tokens.index_copy_(0, idx, _draw(*warped, [rows[i] for i in sampled]))
    chosen: list[int] = tokens.tolist()
    if logprobs is not None:
        where = {row: j for j, row in enumerate(sampled)}  # a sampled row's place in warped
        for i, row in enumerate(rows):
            if row.logprobs:
                if i in where:
                    assert warped is not None
                    j = where[i]
                    logprobs[i] = _logprob(warped[0][j], warped[1][j], row, chosen[i])
                else:
                    logprobs[i] = _logprob(logits[i], None, row, chosen[i])
    return chosen


def _logprob(
    logits: torch.Tensor, order: torch.Tensor | None, row: Sampling, token: int
) -> TokenLogprob:
    """``token`` with its log-probability and the row's ``top_logprobs`` most likely
    alternatives, from one row's distribution: a sampled row's warped, sorted logits
    (``order`` their token ids, as ``warp`` returns them: what its draw came from), or a
    greedy row's logits as :func:`choose` left them (penalty and ``min_new_tokens``
    applied; ``order`` None). Alternatives of probability 0 (filtered out, or EOS held
    off) are left out."""
    logp = logits.log_softmax(-1)
    if order is not None:
        chosen = float(logp[(order == token).nonzero()[0, 0]])
        # already sorted, most likely first
        top_lp, top_ids = logp[: row.top_logprobs], order[: row.top_logprobs]
    else:
        chosen = float(logp[token])
        top_lp, top_ids = logp.topk(min(row.top_logprobs, logp.shape[-1]))  # k=0: empty
    top: tuple[TokenLogprob, ...] = ()
    if row.top_logprobs:
        top = tuple(
            TokenLogprob(t, lp)
            for t, lp in zip(top_ids.tolist(), top_lp.tolist(), strict=True)
            if lp != _NEG_INF
        )
    return TokenLogprob(token, chosen, top)


def _draw(
    sorted_logits: torch.Tensor, order: torch.Tensor, rows: Sequence[Sampling]
) -> torch.Tensor:
    """A draw from each row's own generator over its warped distribution (``warp``'s
    output; row-wise ops)."""
    cdf = sorted_logits.softmax(-1).cumsum(-1)
    draws = torch.cat([torch.rand(1, generator=r.generator) for r in rows]).to(order.device)
    pick = torch.searchsorted(cdf, (draws * cdf[:, -1]).unsqueeze(1)).clamp_(max=cdf.shape[-1] - 1)
    return order.gather(1, pick).squeeze(1)


def warp(logits: torch.Tensor, rows: Sequence[Sampling]) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature, then top-k, then top-p, then min-p, as transformers' warpers apply them.

    Returns each row's scaled logits sorted in descending order, the tokens the
    filters drop set to -inf, and the order (``order[i, j]`` is the token id of
    ``sorted[i, j]``). As in transformers (and vLLM), top-k keeps every token tied
    with the k-th; top-p keeps the smallest prefix whose mass reaches ``top_p``,
    the token that crosses it included; min-p (``MinPLogitsWarper``) drops the
    tokens whose probability is below ``min_p`` times the most likely token's.
    """
    dev = logits.device
    temps = torch.tensor([r.temperature for r in rows], device=dev)
    logits = logits / temps.unsqueeze(1)
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    vocab = sorted_logits.shape[-1]
    if any(r.top_k and r.top_k < vocab for r in rows):
        ks = torch.tensor([r.top_k if r.top_k and r.top_k < vocab else vocab for r in rows])
        kth = sorted_logits.gather(1, (ks - 1).unsqueeze(1).to(dev))
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, _NEG_INF)
    if any(r.top_p < 1.0 for r in rows):
        # A row without top-p drops nothing: with a bound of 1.0 it would lose the tokens
        # past the point where its rounded cumulative mass reaches 1, and only when a
        # neighbour's top-p made this step run (a row's tokens must not depend on those).
        ps = torch.tensor([r.top_p if r.top_p < 1.0 else math.inf for r in rows], device=dev)
        probs = sorted_logits.softmax(-1)
        # keep the smallest prefix whose mass reaches top_p (the crossing token stays)
        drop = (probs.cumsum(-1) - probs) >= ps.unsqueeze(1)
        # The most likely token always stays (transformers' min_tokens_to_keep=1): a top_p
        # below float32's range (1e-46 passes the field's check) rounds to 0 and would
        # drop every token, and the draw would come from NaN.
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, _NEG_INF)
    if any(r.min_p > 0.0 for r in rows):
        # A row without min-p has a bound of 0, under which no probability falls.
        mins = torch.tensor([r.min_p for r in rows], device=dev)
        probs = sorted_logits.softmax(-1)
        # probs[:, 0] is the row's largest (transformers' amax): the logits are sorted
        drop = probs < mins.unsqueeze(1) * probs[:, :1]
        # The most likely token always stays (transformers' min_tokens_to_keep=1).
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, _NEG_INF)
    return sorted_logits, order


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """``rows`` as one ``(len(rows), longest)`` id tensor, each row padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
    return ids
