# SPDX-License-Identifier: Apache-2.0
"""Per-row token choice (``_generation``) checked against transformers' own ``generate``.

Greedy rows must pick what ``generate`` picks, token for token (repetition penalty
and ``min_new_tokens`` included); sampled rows must draw from the distribution that
transformers' warpers (temperature, top-k, top-p, min-p) leave; a seeded row's tokens must
not depend on its batch neighbours nor on the step it arrives at.
"""

from __future__ import annotations

import math

import attrs
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from mp13_engine import Engine, FinishReason, Request, Response
from mp13_engine._generation import Sampling, choose, warp
from tests.engine._loop_harness import StepHarness

_VOCAB = 12


def _hf_probs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float = 0.0
) -> torch.Tensor:
    """The distribution ``generate(do_sample=True, ...)`` draws from (its warpers, in its order)."""
    scores = logits.unsqueeze(0)
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    if min_p:  # generate adds it whenever min_p is set; 0 drops nothing
        scores = MinPLogitsWarper(min_p)(None, scores)
    return scores.softmax(-1)[0]


def _mp13_probs(logits: torch.Tensor, rows: list[Sampling]) -> torch.Tensor:
    sorted_logits, order = warp(logits, rows)
    return torch.zeros_like(logits).scatter(1, order, sorted_logits.softmax(-1))


def _sampling(temperature: float, top_k: int, top_p: float, min_p: float = 0.0) -> Sampling:
    request = Request(
        prompt="x", temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=0
    )
    return Sampling(request, max_new=8)


_TEMPERATURE = st.sampled_from([0.05, 0.5, 1.0, 1.7, 10.0])
_TOP_K = st.sampled_from([0, 1, 2, 5, _VOCAB, 50])
_TOP_P = st.sampled_from([0.95, 0.5, 0.1, 1e-6, 1e-300])
_MIN_P = st.sampled_from([0.0, 0.0, 0.05, 0.3, 0.9, 1.0, 1e-300])
_FINITE = st.floats(-12, 12, width=32)
_TIED_ROW = st.tuples(  # ties and ruled-out (-inf) tokens; no top-p, whose cut between
    # tied tokens keeps whichever the sort puts first, in any implementation
    st.lists(
        st.one_of(_FINITE, st.sampled_from([0.0, 1.0, -math.inf])), min_size=_VOCAB, max_size=_VOCAB
    ),
    _TEMPERATURE,
    _TOP_K,
    st.just(1.0),
    _MIN_P,
)
_DISTINCT_ROW = st.tuples(
    st.builds(
        lambda xs, out: [-math.inf if o else x for x, o in zip(xs, out, strict=True)],
        st.lists(_FINITE, min_size=_VOCAB, max_size=_VOCAB, unique=True),
        st.lists(st.booleans(), min_size=_VOCAB, max_size=_VOCAB),
    ),
    _TEMPERATURE,
    _TOP_K,
    _TOP_P,
    _MIN_P,
)
_ROW = st.one_of(_TIED_ROW, _DISTINCT_ROW).filter(lambda r: any(map(math.isfinite, r[0])))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=4))
def test_sampled_rows_draw_from_the_distribution_of_transformers_warpers(rows):
    logits = torch.tensor([r[0] for r in rows], dtype=torch.float32)
    expected = []
    for row_logits, temperature, top_k, top_p, min_p in rows:
        if min_p:
            # Likewise where a token's probability is min_p times the most likely's.
            scaled = torch.tensor(row_logits, dtype=torch.float64) / temperature
            ratio = (scaled - scaled.max()).exp()
            assume(bool(((ratio - min_p).abs() > 1e-4 * min_p).all()))
        if top_p < 1.0:
            # Where top_p falls (within rounding) on a cumulative mass, which token stays
            # is a matter of float rounding.
            kept = _hf_probs(torch.tensor(row_logits, dtype=torch.float64), temperature, top_k, 1.0)
            ranked = kept.sort(descending=True).values
            before = (ranked.cumsum(0) - ranked)[1:]  # the most likely token always stays
            assume(bool(((before - top_p).abs() > 1e-4).all()))
        expected.append(_hf_probs(logits[len(expected)], temperature, top_k, top_p, min_p))
    got = _mp13_probs(logits.clone(), [_sampling(t, k, p, m) for _, t, k, p, m in rows])
    # row-wise: each row gets its own parameters, whatever its neighbours ask
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-4)
    assert ((got > 0) == (torch.stack(expected) > 0)).all()


def test_top_k_keeps_every_token_tied_with_the_kth_like_transformers():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    probs = _mp13_probs(logits, [_sampling(1.0, 2, 1.0)])[0]
    assert (probs > 0).tolist() == [True, False, True, True, False]
    torch.testing.assert_close(probs, _hf_probs(logits[0], 1.0, 2, 1.0))


def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_top_one():
    # probabilities proportional to 8, 4, 2, 1, 1: min_p=0.25 keeps 8, 4 and 2
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, 0.0]]) * math.log(2)
    probs = _mp13_probs(logits.clone(), [_sampling(1.0, 0, 1.0, 0.25)])[0]
    assert (probs > 0).tolist() == [True, True, True, False, False]
    torch.testing.assert_close(probs, _hf_probs(logits[0], 1.0, 0, 1.0, 0.25))
    # at temperature 2 the ratios are square roots: 8, 5.7, 4, 2.8, 2.8 all pass 0.25
    probs = _mp13_probs(logits.clone(), [_sampling(2.0, 0, 1.0, 0.25)])[0]
    assert (probs > 0).all()
    torch.testing.assert_close(probs, _hf_probs(logits[0], 2.0, 0, 1.0, 0.25))


@pytest.mark.parametrize("min_p", [1.0, 1e-300])
def test_min_p_at_its_bounds_matches_transformers(min_p):
    """1 keeps only the tokens tied with the most likely; a min_p below float32's range
    rounds to 0 and keeps every token the model allows, as in transformers."""
    logits = torch.tensor([[3.0, 1.0, 3.0, float("-inf"), -2.0]])
    probs = _mp13_probs(logits.clone(), [_sampling(1.0, 0, 1.0, min_p)])[0]
    kept = [True, False, True, False, False] if min_p == 1.0 else [True, True, True, False, True]
    assert (probs > 0).tolist() == kept
    torch.testing.assert_close(probs, _hf_probs(logits[0], 1.0, 0, 1.0, min_p))


@pytest.mark.parametrize("top_p", [1e-40, 1e-46, 1e-300])
def test_a_top_p_below_float32s_range_keeps_the_most_likely_token(top_p):
    """It rounded to 0 in float32 and dropped every token: the draw came from NaN."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 3.0]])
    probs = _mp13_probs(logits, [_sampling(1.0, 0, top_p)])[0]
    assert probs.tolist() == [0.0, 0.0, 0.0, 1.0]
    torch.testing.assert_close(probs, _hf_probs(logits[0], 1.0, 0, top_p))
    row = Sampling(Request(prompt="x", temperature=1.0, top_p=top_p, seed=1), max_new=8)
    assert choose(logits.clone(), [row], [0], torch.tensor([], dtype=torch.long)) == [3]


@pytest.mark.parametrize("temperature", [1e30, 1e38, 1e300])
def test_a_huge_temperature_samples_uniformly_over_the_tokens_the_model_allows(temperature):
    """Past float32's range the division made inf; -inf / inf is NaN, and every draw
    then picked the same token whatever the seed."""
    logits = torch.tensor([[5.0, -2.0, float("-inf"), 0.5]])
    probs = _mp13_probs(logits, [_sampling(temperature, 0, 1.0)])[0]
    torch.testing.assert_close(probs, torch.tensor([1 / 3, 1 / 3, 0.0, 1 / 3]))
    picks = set()
    for seed in range(40):
        row = Sampling(Request(prompt="x", temperature=temperature, seed=seed), max_new=8)
        picks.update(choose(logits.clone(), [row], [0], torch.tensor([], dtype=torch.long)))
    assert picks == {0, 1, 3}


@pytest.mark.parametrize("penalty", [1e-300, 1e-40, 1e-25])
def test_a_tiny_repetition_penalty_samples_the_most_likely_seen_token(penalty):
    """Below float32's range a seen positive logit became +inf and the draw came from
    NaN: every seed picked the least likely token. As the penalty goes to 0, the seen
    token with the highest logit takes all the mass."""
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 3.0]])
    picks = set()
    for seed in range(60):
        request = Request(prompt="x", temperature=1.0, seed=seed, repetition_penalty=penalty)
        row = Sampling(request, max_new=8)
        row.note([0, 1], vocab=5, device=logits.device)
        picks.update(choose(logits.clone(), [row], [0], torch.tensor([], dtype=torch.long)))
    assert picks == {0}


# ----- against generate on a tiny model


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", dtype="float32") as eng:
        yield eng


def _generate_ids(engine: Engine, prompt: str, **settings: object) -> list[int]:
    ids = engine._state.tokens.encode(engine.format_prompt(Request(prompt=prompt)))
    with torch.inference_mode():
        out = engine.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            pad_token_id=engine._state.pad_id,
            do_sample=False,
            **settings,
        )
    return out[0, len(ids) :].tolist()


@pytest.mark.parametrize(
    "settings",
    [
        {"max_new_tokens": 24},
        {"max_new_tokens": 24, "repetition_penalty": 1.3},
        {"max_new_tokens": 24, "repetition_penalty": 0.7},
        {"max_new_tokens": 12, "min_new_tokens": 12, "repetition_penalty": 2.0},
        {"max_new_tokens": 1},
    ],
)
def test_greedy_equals_generate_token_for_token_alone_and_in_a_batch(engine, settings):
    prompts = ["hello hello hello", "The seven seas sail far away", "é ü 世界"]
    expected = [_generate_ids(engine, p, **settings) for p in prompts]
    eos = set(engine._state.eos_ids)
    texts = [engine._state.tokens.decode([t for t in ids if t not in eos]) for ids in expected]
    alone = [engine.generate(Request(prompt=p, **settings)) for p in prompts]
    batch = engine.generate_many([Request(prompt=p, **settings) for p in prompts])
    for ids, text, a, b in zip(expected, texts, alone, batch, strict=True):
        assert a.raw_text == b.raw_text == text
        n = len(ids) - (ids[-1] in eos)  # generate keeps the EOS it stopped on
        assert a.metrics.completion_tokens == b.metrics.completion_tokens == n
        stopped = ids[-1] in eos
        assert a.finish_reason is (FinishReason.STOP if stopped else FinishReason.LENGTH)


def _reference_sample_ids(
    engine: Engine,
    request: Request,
    logprobs: list[float] | None = None,
    tops: list[list[tuple[int, float]]] | None = None,
) -> list[int]:
    """A seeded request's tokens by transformers' warpers: the model run on the whole
    sequence each step, ``generate``'s warpers in ``generate``'s order, and one draw per
    step from the request's own CPU generator (the engine's documented draw: the first
    token whose cumulative probability, most likely first, reaches it). ``logprobs``
    collects the log-probability each token had in the distribution it was drawn from;
    ``tops`` the ``request.top_logprobs`` most likely tokens of it (probability 0 left out)."""
    ids = engine._state.tokens.encode(engine.format_prompt(request))
    generator = torch.Generator()
    generator.manual_seed(request.seed)
    eos = list(engine._state.eos_ids)
    out: list[int] = []
    for _ in range(request.max_new_tokens):
        with torch.inference_mode():
            logits = engine.model(input_ids=torch.tensor([ids + out])).logits[0, -1]
        logits = logits.float().clone()
        if len(out) < request.min_new_tokens:
            logits[eos] = -math.inf
        probs = _hf_probs(logits, request.temperature, request.top_k, request.top_p, request.min_p)
        ranked, order = probs.sort(descending=True)
        cdf = ranked.cumsum(0)
        draw = torch.rand(1, generator=generator)
        out.append(int(order[torch.searchsorted(cdf, draw * cdf[-1]).clamp(max=len(cdf) - 1)]))
        if logprobs is not None:
            logprobs.append(math.log(float(probs[out[-1]])))
        if tops is not None:
            top_p, top_ids = probs.topk(request.top_logprobs)
            tops.append(
                [(int(t), math.log(float(p))) for t, p in zip(top_ids, top_p, strict=True) if p > 0]
            )
    return out


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
@pytest.mark.parametrize(
    "params",
    [{"temperature": 1.2, "min_p": 0.05}, {"temperature": 0.8, "top_k": 20, "min_p": 0.2}],
)
def test_a_seeded_min_p_row_draws_transformers_tokens_alone_and_in_a_batch(engine, seed, params):
    target = Request(
        prompt="The seven seas sail far away",
        max_new_tokens=12,
        min_new_tokens=12,
        seed=seed,
        **params,
    )
    text = engine._state.tokens.decode(_reference_sample_ids(engine, target))
    assert engine.generate(target).raw_text == text
    assert engine.generate(target).logprobs is None  # not asked for
    neighbours = [
        Request(prompt="hello hello", max_new_tokens=9, temperature=1.0, top_p=0.8, seed=1),
        Request(prompt="é ü 世界", max_new_tokens=5),  # greedy
        Request(prompt="ok ok ok", max_new_tokens=12, temperature=2.0, min_p=0.3, seed=2),
    ]
    batch = engine.generate_many([neighbours[0], target, *neighbours[1:]])
    assert batch[1].raw_text == text


# ----- Request.logprobs


def test_logprobs_of_sampled_tokens_are_those_of_transformers_warped_distribution(engine):
    """Alone and beside rows that ask for none (or other settings), each generated token
    comes with its log-probability in the distribution it was drawn from."""
    target = Request(
        prompt="The seven seas sail far away",
        max_new_tokens=10,
        min_new_tokens=10,
        seed=5,
        temperature=1.3,
        top_k=30,
        top_p=0.95,
        min_p=0.05,
        logprobs=True,
    )
    expected: list[float] = []
    ids = _reference_sample_ids(engine, target, expected)
    alone = engine.generate(target)
    others = [
        Request(prompt="hello hello", max_new_tokens=6, temperature=0.7, seed=1),
        Request(prompt="é ü 世界", max_new_tokens=4, logprobs=True),  # greedy
    ]
    batch = engine.generate_many([others[0], target, others[1]])
    for response in (alone, batch[1]):
        assert response.logprobs is not None
        assert [lp.token for lp in response.logprobs] == ids
        got = [lp.logprob for lp in response.logprobs]
        assert got == pytest.approx(expected, abs=1e-4)
        assert all(lp <= 0.0 for lp in got)
    assert batch[0].logprobs is None
    assert batch[2].logprobs is not None
    assert len(batch[2].logprobs) == batch[2].metrics.completion_tokens


@pytest.mark.parametrize(
    "settings",
    [
        {"max_new_tokens": 16},
        {"max_new_tokens": 10, "min_new_tokens": 10, "repetition_penalty": 1.4},
    ],
)
def test_greedy_logprobs_are_generates_scores_log_softmaxed(engine, settings):
    prompt = "The seven seas sail far away"
    ids = engine._state.tokens.encode(engine.format_prompt(Request(prompt=prompt)))
    with torch.inference_mode():
        out = engine.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            pad_token_id=engine._state.pad_id,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            **settings,
        )
    new = out.sequences[0, len(ids) :].tolist()
    eos = set(engine._state.eos_ids)
    if new[-1] in eos:  # the engine leaves the end-of-sequence token out
        new = new[:-1]
    expected = [float(out.scores[t][0].log_softmax(-1)[tok]) for t, tok in enumerate(new)]
    response = engine.generate(Request(prompt=prompt, logprobs=True, **settings))
    assert response.logprobs is not None
    assert len(response.logprobs) == response.metrics.completion_tokens == len(new)
    assert [lp.token for lp in response.logprobs] == new
    assert [lp.logprob for lp in response.logprobs] == pytest.approx(expected, abs=1e-4)


def _tops(response: Response) -> list[list[tuple[int, float]]]:
    assert response.logprobs is not None
    return [[(alt.token, alt.logprob) for alt in lp.top_logprobs] for lp in response.logprobs]


def _same_tops(got: list[list[tuple[int, float]]], expected: list[list[tuple[int, float]]]):
    assert [[t for t, _ in step] for step in got] == [[t for t, _ in step] for step in expected]
    flat = [lp for step in got for _, lp in step]
    assert flat == pytest.approx([lp for step in expected for _, lp in step], abs=1e-4)


@pytest.mark.parametrize(
    ("warpers", "top_logprobs"),
    [
        ({"temperature": 1.3, "top_p": 0.95, "min_p": 0.02}, 5),
        # top_k keeps fewer tokens than asked for: the ruled-out ones are no alternatives
        ({"temperature": 0.8, "top_k": 3}, 20),
    ],
)
def test_top_logprobs_of_sampled_tokens_are_transformers_warped_top_tokens(
    engine, warpers, top_logprobs
):
    """Alone and in a batch beside rows that ask for fewer (or none), each token's
    alternatives are the most likely tokens of the distribution it was drawn from."""
    target = Request(
        prompt="The seven seas sail far away",
        max_new_tokens=8,
        min_new_tokens=8,
        seed=11,
        logprobs=True,
        top_logprobs=top_logprobs,
        **warpers,
    )
    expected: list[float] = []
    tops: list[list[tuple[int, float]]] = []
    ids = _reference_sample_ids(engine, target, expected, tops)
    alone = engine.generate(target)
    others = [
        Request(prompt="hello hello", max_new_tokens=6, temperature=0.7, seed=1, logprobs=True),
        Request(prompt="é ü 世界", max_new_tokens=4, logprobs=True, top_logprobs=2),  # greedy
        Request(prompt="ok ok", max_new_tokens=5),
    ]
    batch = engine.generate_many([others[0], target, others[1], others[2]])
    for response in (alone, batch[1]):
        assert response.logprobs is not None
        assert [lp.token for lp in response.logprobs] == ids
        assert [lp.logprob for lp in response.logprobs] == pytest.approx(expected, abs=1e-4)
        _same_tops(_tops(response), tops)
        for lp in response.logprobs:
            assert 0 < len(lp.top_logprobs) <= top_logprobs
            assert all(math.isfinite(alt.logprob) for alt in lp.top_logprobs)
            assert all(alt.top_logprobs == () for alt in lp.top_logprobs)
            # the chosen token was drawn, so it is no less likely than the last alternative
            if lp.token not in [alt.token for alt in lp.top_logprobs]:
                assert len(lp.top_logprobs) == top_logprobs
    if "top_k" in warpers:
        assert all(len(step) <= 3 for step in _tops(alone))  # no tie in this model's logits
    assert batch[0].logprobs is not None and all(lp.top_logprobs == () for lp in batch[0].logprobs)
    assert all(len(step) == 2 for step in _tops(batch[2]))
    assert batch[3].logprobs is None


@pytest.mark.parametrize("top_logprobs", [1, 20])
def test_greedy_top_logprobs_are_generates_scores_top_tokens(engine, top_logprobs):
    prompt = "The seven seas sail far away"
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "repetition_penalty": 1.3}
    ids = engine._state.tokens.encode(engine.format_prompt(Request(prompt=prompt)))
    with torch.inference_mode():
        out = engine.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            pad_token_id=engine._state.pad_id,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            **settings,
        )
    new = out.sequences[0, len(ids) :].tolist()
    expected = []
    for scores in out.scores:
        values, order = scores[0].log_softmax(-1).topk(top_logprobs)
        expected.append(
            [(int(t), float(v)) for t, v in zip(order, values, strict=True) if v > -math.inf]
        )
    request = Request(prompt=prompt, logprobs=True, top_logprobs=top_logprobs, **settings)
    alone = engine.generate(request)
    neighbour = Request(prompt="hello", max_new_tokens=3, temperature=0.9, seed=2)
    batch = engine.generate_many([neighbour, attrs.evolve(request, id=None)])
    for response in (alone, batch[1]):
        assert response.logprobs is not None
        assert [lp.token for lp in response.logprobs] == new
        _same_tops(_tops(response), expected)
        # greedy: the chosen token is the most likely one, its logprob the first alternative's
        for lp in response.logprobs:
            assert lp.top_logprobs[0].token == lp.token
            assert lp.top_logprobs[0].logprob == pytest.approx(lp.logprob, abs=1e-6)
    assert batch[0].logprobs is None


def test_logprobs_without_top_logprobs_carry_no_alternatives(engine):
    response = engine.generate(Request(prompt="hello", max_new_tokens=4, logprobs=True))
    assert response.logprobs is not None and len(response.logprobs) == 4
    assert all(lp.top_logprobs == () for lp in response.logprobs)


def test_logprobs_cover_a_stop_strings_tokens_and_come_with_a_streams_last_chunk(engine):
    plain = engine.generate(Request(prompt="hello hello hello", max_new_tokens=12))
    assert len(plain.raw_text) > 3
    stop = plain.raw_text[2:4]  # ends the reply early, its tokens counted
    request = Request(prompt="hello hello hello", max_new_tokens=12, stop=stop, logprobs=True)
    response = engine.generate(request)
    assert response.finish_reason is FinishReason.STOP
    assert response.logprobs is not None
    assert len(response.logprobs) == response.metrics.completion_tokens > 0
    last = list(engine.stream(request))[-1]
    assert last.done and last.response is not None and last.response.logprobs == response.logprobs


# ----- a seeded row alone vs among neighbours that arrive at any step

_WORDS = ("apple pie ", "the river runs ", "é ü 世界 ", "ok ", "seven seas sail far away ")
_NEIGHBOUR = st.tuples(
    st.integers(0, 6),  # arrival step
    st.integers(0, len(_WORDS) - 1),  # prompt
    st.integers(1, 4),  # prompt repeats
    st.integers(1, 16),  # max_new_tokens
    st.sampled_from([0.0, 0.8, 1.5]),  # temperature (0: greedy)
    st.sampled_from([1.0, 1.3]),  # repetition_penalty
)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    neighbours=st.lists(_NEIGHBOUR, max_size=5),
    arrives=st.integers(0, 5),
    chunk=st.sampled_from([16, 512]),
    seed=st.integers(0, 2**64 - 1),
    params=st.sampled_from(
        [
            {"temperature": 1.0},
            {"temperature": 0.7, "top_k": 5, "top_p": 0.9},
            {"temperature": 1.3, "top_p": 0.5, "repetition_penalty": 1.2},
            {"temperature": 1.5, "min_p": 0.1},
            {"temperature": 0.9, "top_k": 8, "min_p": 0.05},
        ]
    ),
)
def test_a_seeded_row_draws_the_same_tokens_whatever_shares_its_steps(
    tiny_model_path, neighbours, arrives, chunk, seed, params
):
    h = StepHarness(
        Engine.load(str(tiny_model_path), device="cpu", dtype="float32"), chunk_tokens=chunk
    )
    target = Request(
        prompt="The seven seas sail far away",
        max_new_tokens=16,
        min_new_tokens=16,
        seed=seed,
        **params,
    )
    alone = h.solo(target).raw_text
    assert h.solo(target).raw_text == alone  # the same seed, the same tokens
    waiting = sorted(neighbours)
    states = []
    mine = None
    for step in range(500):
        while waiting and waiting[0][0] <= step:
            _, word, repeats, n, temperature, penalty = waiting.pop(0)
            request = Request(
                prompt=_WORDS[word] * repeats,
                max_new_tokens=n,
                temperature=temperature,
                repetition_penalty=penalty,
                seed=step,
            )
            states.append(h.submit(request))
        if step == arrives:
            mine = h.submit(target)
        if mine is not None and mine.done and not waiting and all(s.done for s in states):
            break
        h.step()
    assert mine is not None and mine.done
    assert mine.response.raw_text == alone
