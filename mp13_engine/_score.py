# SPDX-License-Identifier: Apache-2.0
"""Scoring a given text: the log-probability the model gives a continuation of a context.

``Engine.score`` reports what ``Request.logprobs`` cannot: the probability of a text
the caller chose (a reference answer, each option of a multiple-choice question), not
of one the model generated. It is a worker call, not a decode-loop row: one forward
over context + continuation between two steps, in inference mode, with no KV cache
kept and nothing of the prefix cache touched (it says it changed no weights), so
requests being served only wait for that one forward.

Tokenization at the boundary (:func:`prepare_score`): the context is rendered and encoded
exactly as ``generate`` feeds it (``PromptFormatter.prompt`` and
``TokenizerGuard.encode_prompt``: chat template, BOS of a raw prompt, message data
that spells control tokens encoded as text). The continuation is appended to the
rendered text and the whole is encoded together; its tokens are the ones after the
context's, which must be a prefix of the whole's. When they are not (the tokenizer
merges the context's last characters with the continuation's first, e.g. a context
ending in a space and a continuation starting with a word), it is a ``RequestError``
that says to move those characters, never a silent re-tokenization. Control-token
spellings in the continuation are control tokens (``"Paris<|im_end|>"`` scores the end
of the turn too), as in ``engine.count_tokens(str)``.

What is scored is the model's own distribution at temperature 1 (what a greedy
``generate`` reports as logprobs): a request that asks to reshape it
(``repetition_penalty``, ``min_new_tokens``, sampling warpers) is refused; fields that
only steer generation (``max_new_tokens``, ``stop``, ``logprobs``...) are ignored.
Adapters are ``Request.adapters`` resolved as for a decode row (defaults, the base
model, one adapter or a combination), run through PEFT's per-row ``adapter_names``.
"""

from __future__ import annotations

import math

import attrs
import torch

from mp13_engine._adapters import AdapterManager
from mp13_engine._errors import EngineError, RequestError
from mp13_engine._forward import ModelCall
from mp13_engine._markup import Prompt
from mp13_engine._request_fields import FIELDS
from mp13_engine._state import EngineState
from mp13_engine._types import Request, TextScore, TokenLogprob


@attrs.frozen
class ScoreInput:
    """A checked scoring job: the ids of context + continuation and where the latter starts."""

    ids: tuple[int, ...]
    context_len: int
    adapters: tuple[str, ...] | None
    top_logprobs: int


def _reshaping(req: Request) -> list[str]:
    """The fields of ``req`` that would reshape the distribution a score reads."""
    fields = []
    if req.repetition_penalty != 1.0:
        fields.append(f"repetition_penalty={req.repetition_penalty}")
    if req.min_new_tokens:
        fields.append(f"min_new_tokens={req.min_new_tokens}")
    if req.sampling:
        if req.sampling_temperature != 1.0:
            fields.append(f"temperature={req.temperature}")
        if req.top_k:
            fields.append(f"top_k={req.top_k}")
        if req.top_p != 1.0:
            fields.append(f"top_p={req.top_p}")
        if req.min_p:
            fields.append(f"min_p={req.min_p}")
    return fields


def prepare_score(
    state: EngineState, req: Request, continuation: object, top_logprobs: int | None
) -> ScoreInput:
    """*caller thread*: render and encode ``req`` + ``continuation`` (see the module docstring)."""
    if not isinstance(continuation, str):
        raise RequestError(
            f"the continuation to score must be a string, not {type(continuation).__name__}",
            field="continuation",
        )
    if not continuation:
        raise RequestError(
            "the continuation to score is empty; give the text whose log-probability you want",
            field="continuation",
        )
    k = req.top_logprobs if top_logprobs is None else top_logprobs
    k = FIELDS["top_logprobs"].check("top_logprobs", k)
    reshaping = _reshaping(req)
    if reshaping:
        raise RequestError(
            f"score reads the model's own distribution at temperature 1, so it cannot apply "
            f"{', '.join(reshaping)}; leave those fields at their defaults for score"
        )
    prompt = state.formatter.prompt(req)
    context = state.tokens.encode_prompt(prompt)
    if not context:
        raise RequestError(
            "the context renders to no tokens, so the continuation's first token has nothing "
            "to be predicted from; give some context text",
            field="messages" if req.messages is not None else "prompt",
        )
    whole = state.tokens.encode_prompt(Prompt(prompt.text + continuation, prompt.forged))
    if whole[: len(context)] != context or len(whole) == len(context):
        raise RequestError(
            "the context's tokens are not a prefix of context + continuation's (the tokenizer "
            f"joins the end of the context with the start of {continuation[:20]!r}); move the "
            "characters at the boundary (often a space at the end of the context) to the "
            "start of the continuation",
            field="continuation",
        )
    ctx = state.context_len
    if ctx is not None and len(whole) > ctx:
        raise RequestError(
            f"context + continuation are {len(whole)} tokens ({len(context)} + "
            f"{len(whole) - len(context)}) but the model's context window is {ctx}; shorten "
            "the context or score the continuation in parts",
            field="continuation",
        )
    return ScoreInput(tuple(whole), len(context), req.adapters, k)


def score_on_worker(state: EngineState, manager: AdapterManager, job: ScoreInput) -> TextScore:
    """*worker*: one forward over ``job.ids`` on its adapters; the continuation's logprobs.

    The caller says the call changed nothing of the weights first (a combination built
    for it says its own change)."""
    adapter = manager._resolve_for_wave(job.adapters)
    n = len(job.ids) - job.context_len
    call = ModelCall(state, lambda: manager)
    try:
        with torch.inference_mode():
            ids = torch.tensor([job.ids], device=state.device)
            logits = call.whole(adapter, ids, keep=n + 1)  # the positions that predict it
            # Position i predicts token i + 1: the last n + 1 positions but the very last.
            logp = logits[-(n + 1) : -1].float().log_softmax(-1)
            targets = torch.tensor(job.ids[job.context_len :], device=logp.device)
            chosen = logp.gather(1, targets.unsqueeze(1)).squeeze(1).tolist()
            k = min(job.top_logprobs, logp.shape[-1])
            top_lp, top_ids = logp.topk(k) if k else (None, None)
    except Exception as exc:
        raise EngineError(
            f"scoring failed in the model's forward ({type(exc).__name__}: {exc}); the engine "
            "goes on serving: retry with a shorter text, or check the adapter"
        ) from exc
    out = []
    for i, (token, lp) in enumerate(zip(job.ids[job.context_len :], chosen, strict=True)):
        top: tuple[TokenLogprob, ...] = ()
        if top_lp is not None and top_ids is not None:
            top = tuple(
                TokenLogprob(t, a)
                for t, a in zip(top_ids[i].tolist(), top_lp[i].tolist(), strict=True)
                if a != -math.inf
            )
        out.append(TokenLogprob(token, lp, top))
    return TextScore(logprobs=out, context_tokens=job.context_len)
