# SPDX-License-Identifier: Apache-2.0
"""``Engine.score`` / ``ascore``: the log-probability the model gives a given continuation.

Checked against a plain transformers forward's log-softmax (same tokens, 1e-5), against
PEFT's own model on an adapter and on a combination, against ``generate``'s logprobs for a
continuation the model itself generated greedily, for its typed errors (the engine goes on
serving after each), and while other requests are being served (they get their usual text).
"""

from __future__ import annotations

import asyncio
import math
import threading

import pytest
import torch

from mp13_engine import (
    AdapterError,
    Engine,
    Request,
    RequestError,
    TextScore,
    TokenLogprob,
)

QUESTION = "What is the capital of France?"
ANSWER = "Paris is the capital of France."


@pytest.fixture(scope="module")
def engine(tiny_model_path, adapter_dir):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as eng:
        eng.adapters.load("a")
        eng.adapters.load("b")
        yield eng


def _reference(model, engine, request, continuation_ids, top=0):
    """Per-token logprobs of ``continuation_ids`` after ``request``'s prompt, by a plain
    forward of ``model`` (and the ``top`` alternatives of each)."""
    context = engine._state.tokens.encode(engine.format_prompt(request))
    ids = torch.tensor([context + list(continuation_ids)])
    with torch.inference_mode():
        logp = model(input_ids=ids).logits[0].float().log_softmax(-1)
    rows = logp[len(context) - 1 : -1]
    chosen = [float(rows[i, t]) for i, t in enumerate(continuation_ids)]
    tops = [list(zip(*(x.tolist() for x in r.topk(top)), strict=True)) for r in rows]
    return len(context), chosen, tops


@pytest.fixture(scope="module")
def plain(tiny_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


@pytest.mark.parametrize(
    "request_",
    [QUESTION, Request(prompt="The capital of France is"), [{"role": "user", "content": "hi"}]],
    ids=["chat-string", "raw-prompt", "messages"],
)
def test_score_is_a_plain_forwards_log_softmax(engine, plain, request_):
    score = engine.score(request_, " " + ANSWER, top_logprobs=3, adapters=[])
    req = engine._coerce(request_, {"adapters": []})
    context_len, expected, tops = _reference(plain, engine, req, score.tokens, top=3)
    assert score.context_tokens == context_len
    # The continuation's tokens are those of context + continuation after the context's.
    whole = engine._state.tokens.encode(engine.format_prompt(req) + " " + ANSWER)
    assert list(score.tokens) == whole[context_len:]
    assert [lp.logprob for lp in score.logprobs] == pytest.approx(expected, abs=1e-5)
    for lp, top in zip(score.logprobs, tops, strict=True):
        assert [alt.token for alt in lp.top_logprobs] == [t for _, t in top]
        assert [alt.logprob for alt in lp.top_logprobs] == pytest.approx(
            [v for v, _ in top], abs=1e-5
        )
    assert score.sum_logprob == pytest.approx(sum(expected), abs=1e-4)
    assert score.mean_logprob == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    assert score.perplexity == pytest.approx(math.exp(-score.mean_logprob))


def test_score_on_an_adapter_and_a_combination_is_pefts(engine, tiny_model_path, adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    ref = PeftModel.from_pretrained(ref, adapter_dir / "a", adapter_name="a")
    ref.load_adapter(adapter_dir / "b", adapter_name="b")
    ref.eval()
    base = engine.score(QUESTION, ANSWER, adapters=[])
    for adapters in (["a"], ["b"], ["a", "b"]):
        score = engine.score(QUESTION, ANSWER, adapters=adapters)
        ref.base_model.set_adapter(adapters)
        req = engine._coerce(QUESTION, {"adapters": adapters})
        _, expected, _ = _reference(ref, engine, req, score.tokens)
        assert score.tokens == base.tokens
        assert [lp.logprob for lp in score.logprobs] == pytest.approx(expected, abs=1e-5)
        assert score.sum_logprob != pytest.approx(base.sum_logprob, abs=1e-3)  # it applied
    # The base model with adapters loaded is the plain base model.
    with ref.disable_adapter():
        _, expected, _ = _reference(ref, engine, engine._coerce(QUESTION, {}), base.tokens)
    assert [lp.logprob for lp in base.logprobs] == pytest.approx(expected, abs=1e-5)


def test_default_adapters_apply_as_in_generate(engine):
    engine.adapters.set_default("a")
    try:
        assert engine.score(QUESTION, ANSWER) == engine.score(QUESTION, ANSWER, adapters="a")
    finally:
        engine.adapters.set_default(None)
    assert engine.score(QUESTION, ANSWER) == engine.score(QUESTION, ANSWER, adapters=[])


@pytest.mark.parametrize(
    ("adapters", "prompt"),
    # Prompts whose greedy reply (random weights) decodes to text that tokenizes back the same.
    [([], "Once upon a time"), (["a"], "hello")],
)
def test_a_greedy_generations_logprobs_are_its_score(engine, adapters, prompt):
    request = Request(prompt=prompt, max_new_tokens=12, adapters=adapters)
    response = engine.generate(request, logprobs=True, parse_tools=False)
    assert response.logprobs
    generated = [lp.token for lp in response.logprobs]
    score = engine.score(request, engine.tokenizer.decode(generated))
    assert list(score.tokens) == generated  # the decoded reply tokenizes back the same
    assert [lp.logprob for lp in score.logprobs] == pytest.approx(
        [lp.logprob for lp in response.logprobs], abs=1e-5
    )


def test_ascore_is_score(engine):
    async def main() -> TextScore:
        return await engine.ascore(QUESTION, ANSWER, top_logprobs=2, adapters=["b"])

    assert asyncio.run(main()) == engine.score(QUESTION, ANSWER, top_logprobs=2, adapters=["b"])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda e: e.score(QUESTION, ""), RequestError, "continuation to score is empty"),
        (lambda e: e.score(QUESTION, None), RequestError, "must be a string"),
        (lambda e: e.score(QUESTION, ANSWER, adapters=["zzz"]), AdapterError, "zzz"),
        (lambda e: e.score(QUESTION, "word " * 5000), RequestError, "context window"),
        (lambda e: e.score(Request(prompt="abc\n"), "\nxyz"), RequestError, "boundary"),
        (lambda e: e.score(QUESTION, ANSWER, repetition_penalty=1.3), RequestError, "repetition"),
        (lambda e: e.score(QUESTION, ANSWER, temperature=0.5), RequestError, "temperature"),
        (lambda e: e.score(QUESTION, ANSWER, top_logprobs=21), RequestError, "top_logprobs"),
        (lambda e: e.score([QUESTION, ANSWER], ANSWER), RequestError, "one context at a time"),
        (lambda e: e.score(QUESTION, ANSWER, temprature=1.0), RequestError, "temperature"),
    ],
    ids=[
        "empty",
        "not-text",
        "unknown-adapter",
        "too-long",
        "boundary-merge",
        "penalty",
        "temperature",
        "too-many-tops",
        "several-contexts",
        "misspelt-field",
    ],
)
def test_bad_input_is_a_typed_error_and_the_engine_goes_on(engine, call, error, match):
    with pytest.raises(error, match=match) as info:
        call(engine)
    if isinstance(info.value, RequestError) and "continuation" in str(info.value):
        assert info.value.field == "continuation"
    assert engine.generate(QUESTION, max_new_tokens=3).ok
    assert engine.score(QUESTION, ANSWER).logprobs


def test_a_closed_engine_refuses_to_score(tiny_model_path):
    engine = Engine.load(str(tiny_model_path), device="cpu")
    engine.close()
    with pytest.raises(Exception, match="closed") as info:
        engine.score(QUESTION, ANSWER)
    assert type(info.value).__name__ == "EngineClosedError"


def test_score_runs_while_requests_are_served(engine):
    prompts = [f"Tell me about the number {i}" for i in range(4)]
    alone = [engine.generate(p, max_new_tokens=40, min_new_tokens=40).text for p in prompts]
    quiet = engine.score(QUESTION, ANSWER, adapters=["a"])
    started = threading.Event()
    scores: list[TextScore] = []
    overlapped: list[bool] = []  # whether a request was still running when a score returned
    futures: list = []

    def scorer() -> None:
        started.wait()
        for _ in range(5):
            scores.append(engine.score(QUESTION, ANSWER, adapters=["a"]))
            overlapped.append(any(not f.done() for f in futures))

    thread = threading.Thread(target=scorer)
    thread.start()
    futures += [engine.submit(p, max_new_tokens=40, min_new_tokens=40) for p in prompts]
    started.set()
    served = [f.result(timeout=120) for f in futures]
    thread.join(timeout=120)
    assert [r.text for r in served] == alone
    assert all(r.ok for r in served)
    assert scores == [quiet] * 5
    assert any(overlapped)  # it ran between the steps of the others


def test_text_score_reads_its_figures_from_its_logprobs():
    score = TextScore(logprobs=[TokenLogprob(1, -1.0), TokenLogprob(2, -3.0)], context_tokens=4)
    assert score.tokens == (1, 2)
    assert score.sum_logprob == -4.0
    assert score.mean_logprob == -2.0
    assert score.perplexity == pytest.approx(math.exp(2.0))
    assert TextScore(logprobs=[TokenLogprob(1, -1e6)], context_tokens=1).perplexity == math.inf
    with pytest.raises(ValueError):
        TextScore(logprobs=[], context_tokens=1)


def test_scoring_keeps_the_prefix_cache(engine):
    """A score changes no weights, so the blocks cached for the base model and an adapter stay."""
    prompt = "A long shared prompt about the sea and its many ships " * 4
    for adapters in ([], ["a"]):
        engine.generate(prompt, max_new_tokens=2, adapters=adapters)
        engine.score(QUESTION, ANSWER, adapters=["b"])  # "b" too: another owner's score
        engine.score(QUESTION, ANSWER, adapters=["a", "b"])  # a combination, cached already
        again = engine.generate(prompt, max_new_tokens=2, adapters=adapters)
        assert again.metrics.cached_tokens > 0, adapters


def test_continue_final_scores_a_continuation_of_the_last_assistant_message(engine, plain):
    messages = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "The capital is"},
    ]
    score = engine.score(messages, " Paris.", continue_final=True, adapters=[])
    req = engine._coerce(messages, {"continue_final": True, "adapters": []})
    assert engine.format_prompt(req).endswith("The capital is")
    _, expected, _ = _reference(plain, engine, req, score.tokens)
    assert [lp.logprob for lp in score.logprobs] == pytest.approx(expected, abs=1e-5)
