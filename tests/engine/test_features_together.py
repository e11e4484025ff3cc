# SPDX-License-Identifier: Apache-2.0
"""This session's request features held against each other, not one at a time.

``min_p``, ``logprobs``/``top_logprobs``, many stop strings (the indexed matcher), the
prefix cache kept across adapter changes, packed steps and the fused LoRA path each have
their own tests; here they share rows and engines. What must hold:

- a seeded row's tokens are the same alone and beside any neighbours (other rows with
  min_p, top_k, stops, logprobs), packed or not, its prompt computed or read from the
  prefix cache; its logprobs agree to float32 rounding (a row's logits come from a
  batched matmul whose shape depends on its neighbours: ~2e-6 seen, 1e-4 allowed, the
  tolerance the logprobs tests already use against ``generate``);
- an adapter row's logprobs on the fused path are PEFT's own path's;
- a request with 10,000 stop strings ends where its one matching stop says, or where it
  was cancelled, with one logprob per generated token, its neighbours untouched;
- after an adapter is loaded or trained (with LoRA dropout), a prompt read from the kept
  prefix cache gives a fresh engine's logprobs.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_engine import Engine, FinishReason, Request, Response, TrainingConfig
from tests.engine._loop_harness import StepHarness

SHARED = "You are a patient assistant who answers in two short sentences. " * 3
TARGET = Request(
    prompt=SHARED + "What is a cat?",
    max_new_tokens=12,
    min_new_tokens=12,
    seed=5,
    temperature=1.2,
    top_k=30,
    min_p=0.05,
    logprobs=True,
    top_logprobs=3,
)
#: float32 rounding between batch shapes (see the module docstring)
TOL = 1e-4

_WORDS = ("apple pie ", "the river runs ", "é ü 世界 ", "ok ", "seven seas sail far away ")
_SETTINGS = (
    {"temperature": 1.0, "min_p": 0.1},
    {"temperature": 0.8, "top_k": 5},
    {"stop": ["a", "e x"]},
    {"logprobs": True, "top_logprobs": 2},
    {"stop": [f"w{i}" for i in range(20)] + ["e"], "logprobs": True},
    {"temperature": 1.5, "min_p": 0.3, "logprobs": True, "top_logprobs": 20},
)
_NEIGHBOUR = st.tuples(
    st.integers(0, 5),  # arrival step
    st.integers(0, len(_WORDS) - 1),  # prompt
    st.integers(1, 4),  # prompt repeats
    st.integers(1, 16),  # max_new_tokens
    st.integers(0, len(_SETTINGS) - 1),  # sampling, stops, logprobs
)


def _logprobs(response: Response) -> list[tuple[int, float, list[tuple[int, float]]]]:
    assert response.logprobs is not None
    return [
        (lp.token, lp.logprob, [(alt.token, alt.logprob) for alt in lp.top_logprobs])
        for lp in response.logprobs
    ]


def _close(got: Response, expected: Response, tol: float = TOL) -> None:
    """The same tokens (and alternatives), log-probabilities within ``tol``."""
    a, b = _logprobs(got), _logprobs(expected)
    assert len(a) == len(b) == got.metrics.completion_tokens
    assert [t for t, _, _ in a] == [t for t, _, _ in b]
    for (_, lp_a, top_a), (_, lp_b, top_b) in zip(a, b, strict=True):
        assert lp_a == pytest.approx(lp_b, abs=tol)
        assert [t for t, _ in top_a] == [t for t, _ in top_b]
        assert [v for _, v in top_a] == pytest.approx([v for _, v in top_b], abs=tol)


@pytest.fixture(scope="module")
def alone(tiny_model_path) -> Response:
    engine = Engine.load(str(tiny_model_path), device="cpu", dtype="float32")
    return StepHarness(engine, chunk_tokens=16, packed=False).solo(TARGET)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    neighbours=st.lists(_NEIGHBOUR, max_size=4),
    arrives=st.integers(0, 5),
    packed=st.booleans(),
    cached=st.booleans(),
)
def test_a_seeded_rows_tokens_and_logprobs_hold_whatever_shares_its_steps(
    tiny_model_path, alone, neighbours, arrives, packed, cached
):
    engine = Engine.load(str(tiny_model_path), device="cpu", dtype="float32")
    h = StepHarness(engine, chunk_tokens=16, prefix_cache_mb=16 if cached else 0, packed=packed)
    first = h.solo(TARGET)
    assert first.raw_text == alone.raw_text
    assert _logprobs(first) == _logprobs(alone)  # alone: bit for bit, packed or not
    waiting = sorted(neighbours)
    states = []
    mine = None
    for step in range(500):
        while waiting and waiting[0][0] <= step:
            _, word, repeats, n, which = waiting.pop(0)
            request = Request(
                prompt=_WORDS[word] * repeats, max_new_tokens=n, seed=step, **_SETTINGS[which]
            )
            states.append(h.submit(request))
        if step == arrives:
            mine = h.submit(TARGET)
        if mine is not None and mine.done and not waiting and all(s.done for s in states):
            break
        h.step()
    assert mine is not None and mine.done
    got = mine.response
    assert (got.metrics.cached_tokens > 0) is cached  # the second ask reads the cache
    assert got.raw_text == alone.raw_text
    _close(got, alone)
    for s in states:
        assert s.response.ok
        if s.request.logprobs:
            assert len(_logprobs(s.response)) == s.response.metrics.completion_tokens


# ----- adapters: the fused path against PEFT's


def _on_adapter(path, adapter_dir, mixed_lora: str, **config) -> list[Response]:
    requests = [
        Request(prompt=SHARED + "Hi", max_new_tokens=8, adapters=["a"], logprobs=True),
        TARGET,
        Request(
            prompt="hello hello",
            max_new_tokens=8,
            adapters=["b"],
            logprobs=True,
            seed=3,
            temperature=0.9,
            min_p=0.1,
            top_logprobs=2,
        ),
    ]
    with Engine.load(
        str(path),
        device="cpu",
        dtype="float32",
        mixed_lora=mixed_lora,
        adapters_dir=str(adapter_dir),
        **config,
    ) as engine:
        engine.adapters.load("a")
        engine.adapters.load("b")
        return engine.generate_many(requests)


def test_adapter_rows_logprobs_are_the_same_on_the_fused_path_and_peft(
    tiny_model_path, adapter_dir
):
    """The fused path adds each row's LoRA delta with its own matmuls (gathered factors),
    PEFT per adapter over row slices: the same sums in another order, so float32 rounding
    (1e-4, as above); the tokens are the same."""
    fused = _on_adapter(tiny_model_path, adapter_dir, "fused")
    peft = _on_adapter(tiny_model_path, adapter_dir, "peft")
    for f, p in zip(fused, peft, strict=True):
        assert f.ok and p.ok
        assert f.raw_text == p.raw_text
        _close(f, p)


def test_prefix_cache_kept_across_an_adapter_load_gives_a_fresh_engines_logprobs(
    tiny_model_path, adapter_dir
):
    base = Request(prompt=SHARED + "Tell me", max_new_tokens=8, logprobs=True, top_logprobs=3)
    on_a = Request(prompt=SHARED + "Tell me", max_new_tokens=8, adapters=["a"], logprobs=True)
    with Engine.load(
        str(tiny_model_path),
        device="cpu",
        dtype="float32",
        prefix_cache_mb=0,
        adapters_dir=str(adapter_dir),
    ) as fresh:
        expected_base = fresh.generate(base)
        fresh.adapters.load("a")
        expected_a = fresh.generate(on_a)
    with Engine.load(
        str(tiny_model_path),
        device="cpu",
        dtype="float32",
        prefix_cache_mb=16,
        adapters_dir=str(adapter_dir),
    ) as engine:
        engine.adapters.load("a")
        engine.generate(on_a)
        engine.generate(base)
        engine.adapters.load("b")  # keeps the base model's and a's blocks
        got_base, got_a = engine.generate(base), engine.generate(on_a)
        engine.adapters.unload("b")
        again_base = engine.generate(base)
    for got, expected in (
        (got_base, expected_base),
        (got_a, expected_a),
        (again_base, expected_base),
    ):
        assert got.metrics.cached_tokens > 0
        assert got.raw_text == expected.raw_text
        _close(got, expected)


# ----- many stop strings, a cancel, and rows that keep going


def test_a_10000_stop_request_ends_at_its_stop_or_its_cancel_beside_rows_that_go_on(
    tiny_model_path,
):
    engine = Engine.load(str(tiny_model_path), device="cpu", dtype="float32")
    h = StepHarness(engine, chunk_tokens=64)
    prompt = "hello hello hello"
    plain = h.solo(Request(prompt=prompt, max_new_tokens=16, min_new_tokens=16, logprobs=True))
    text = plain.raw_text
    assert len(text) > 8
    never = [f"zq{i:05d}x" for i in range(9_999)]
    stop = text[4:7]
    stopping = Request(
        prompt=prompt, max_new_tokens=16, min_new_tokens=16, logprobs=True, stop=[*never, stop]
    )
    cancelled = Request(
        prompt=prompt,
        max_new_tokens=40,
        min_new_tokens=40,
        logprobs=True,
        top_logprobs=2,
        stop=[*never, "no such words"],
    )
    neighbours = [
        Request(
            prompt="The seven seas",
            max_new_tokens=20,
            min_new_tokens=20,
            logprobs=True,
            temperature=1.1,
            min_p=0.1,
            seed=2,
        ),
        Request(prompt="ok ok", max_new_tokens=20, min_new_tokens=20, stop=["zzzz"]),
    ]
    solo = [h.solo(r) for r in neighbours]
    states = [h.submit(r) for r in (stopping, cancelled, *neighbours)]
    while len(states[1].tokens) < 6:
        h.step()
    assert states[1].cancel()
    h.run(states)
    stopped, cut, *rest = [s.response for s in states]

    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.raw_text == text[: text.index(stop)]
    assert len(_logprobs(stopped)) == stopped.metrics.completion_tokens < 16
    n = stopped.metrics.completion_tokens
    head = Response(
        id="", logprobs=plain.logprobs[:n], metrics=attrs.evolve(plain.metrics, completion_tokens=n)
    )
    _close(stopped, head)

    assert cut.finish_reason is FinishReason.CANCELLED
    assert 6 <= cut.metrics.completion_tokens < 40
    assert len(_logprobs(cut)) == cut.metrics.completion_tokens
    assert cut.raw_text == engine._state.tokens.decode(list(states[1].tokens))
    for got, expected in zip(rest, solo, strict=True):
        assert got.finish_reason is FinishReason.LENGTH
        assert got.raw_text == expected.raw_text
        if expected.logprobs is not None:
            _close(got, expected)


def test_after_training_with_dropout_kept_prefixes_and_the_new_adapter_give_exact_logprobs(
    tiny_model_path, adapter_dir, tmp_path
):
    """Training runs the model in training mode with LoRA dropout; once it is done, the
    base model's and adapter a's kept prefixes give a fresh engine's logprobs bit for bit,
    and the trained adapter's rows are deterministic (no dropout left on at inference)."""
    base = Request(prompt=SHARED + "Tell me", max_new_tokens=8, logprobs=True, top_logprobs=3)
    on_a = Request(
        prompt=SHARED + "Tell me",
        max_new_tokens=8,
        adapters=["a"],
        logprobs=True,
        seed=1,
        temperature=1.0,
        min_p=0.05,
    )
    on_t = Request(prompt=SHARED + "Hi", max_new_tokens=6, adapters=["t"], logprobs=True)
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in [("Capital of Zorbia?", "Flumptown."), ("Colour of moonfruit?", "Silver.")]
    ]
    with Engine.load(
        str(tiny_model_path),
        device="cpu",
        dtype="float32",
        prefix_cache_mb=0,
        adapters_dir=str(adapter_dir),
    ) as fresh:
        expected = [fresh.generate(base)]
        fresh.adapters.load("a")
        expected.append(fresh.generate(on_a))
    with Engine.load(
        str(tiny_model_path),
        device="cpu",
        dtype="float32",
        prefix_cache_mb=16,
        adapters_dir=str(adapter_dir),
    ) as engine:
        engine.adapters.load("a")
        engine.generate(base)
        engine.generate(on_a)
        config = TrainingConfig(
            adapter="t",
            dataset=rows,
            max_steps=2,
            batch_size=2,
            learning_rate=5e-3,
            lora_dropout=0.5,
            output_dir=str(tmp_path / "t"),
        )
        assert engine.train(config).result(timeout=120).steps == 2
        got = [engine.generate(base), engine.generate(on_a)]
        trained = [engine.generate(on_t), engine.generate(on_t)]
    for g, e in zip(got, expected, strict=True):
        assert g.metrics.cached_tokens > 0
        assert g.raw_text == e.raw_text
        assert _logprobs(g) == _logprobs(e)
    assert trained[1].metrics.cached_tokens > 0
    assert trained[0].raw_text == trained[1].raw_text
    assert _logprobs(trained[0]) == _logprobs(trained[1])
