# SPDX-License-Identifier: Apache-2.0
"""The step loop: a request's greedy output does not depend on how it was batched.

Alone, in a batch, joining a running batch mid-way, leaving early beside others
(or cancelled), and on a prefix-cache hit: the same tokens, on every tiny
family in float32. Step-level behaviour (arrivals at a given step, cancel
freeing the cache, chunked prefill, training interleaving) is driven step by
step through ``StepHarness``; random schedules with adapters are a property
test against solo runs.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_engine import Engine, FinishReason, Request
from mp13_engine.testing import TINY_FAMILIES
from tests.engine._loop_harness import StepHarness

SYSTEM = {
    "role": "system",
    "content": "You are a patient assistant who answers every question about animals, "
    "numbers and the weather in two short sentences, politely and without lists.",
}
PROMPTS = [
    "Hello there",
    "What is a cat? Tell me more about cats and dogs, please.",
    "x",
    "Count to three please, slowly",
]
LENGTHS = (12, 20, 6, 16)


def _req(i: int, **fields) -> Request:
    fields.setdefault("max_new_tokens", LENGTHS[i])
    return Request(messages=[{"role": "user", "content": PROMPTS[i]}], **fields)


def _wait_tokens(engine, rid: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = engine._inflight.get(rid)
        if st is not None and len(st.tokens) >= n:
            return
        time.sleep(0.0005)
    raise AssertionError(f"request {rid} did not reach {n} tokens")


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_greedy_output_is_the_same_however_the_request_is_batched(tiny_model_factory, family):
    path = str(tiny_model_factory(family))
    with Engine.load(path, device="cpu", dtype="float32", prefix_cache_mb=0) as engine:
        solo = [engine.generate(_req(i)) for i in range(4)]
        expected = [r.raw_text for r in solo]
        assert all(r.metrics.batch_size == 1 for r in solo)

        # all at once; rows leave as their lengths run out while the others go on
        together = engine.generate_many([_req(i) for i in range(4)])
        assert [r.raw_text for r in together] == expected
        assert max(r.metrics.batch_size for r in together) == 4

        # joining a running batch mid-way
        first = _req(1)
        fut = engine.submit(first)
        _wait_tokens(engine, first.id, 4)
        late = [engine.submit(_req(i)) for i in (0, 2, 3)]
        joined = [fut.result(60)] + [f.result(60) for f in late]
        assert [r.raw_text for r in joined] == [expected[i] for i in (1, 0, 2, 3)]
        assert joined[0].metrics.batch_size > 1

        # a neighbour cancelled mid-way leaves; the others are untouched
        victim = _req(3, max_new_tokens=400, min_new_tokens=400)
        futs = [engine.submit(_req(1)), engine.submit(victim), engine.submit(_req(0))]
        _wait_tokens(engine, victim.id, 3)
        engine.cancel(victim.id)
        kept = [futs[0].result(60), futs[2].result(60)]
        assert [r.raw_text for r in kept] == [expected[1], expected[0]]
        assert futs[1].result(60).finish_reason is FinishReason.CANCELLED

    # a prefix-cache hit (the same prompt again, and the next turn of the conversation)
    with Engine.load(path, device="cpu", dtype="float32", prefix_cache_mb=64) as cached:
        turn1 = [SYSTEM, {"role": "user", "content": PROMPTS[1]}]
        first = cached.generate(Request(messages=turn1, max_new_tokens=10))
        again = cached.generate(Request(messages=turn1, max_new_tokens=10))
        assert again.raw_text == first.raw_text
        assert first.metrics.cached_tokens == 0 and again.metrics.cached_tokens >= 32
        turn2 = [*turn1, {"role": "assistant", "content": first.text}]
        turn2.append({"role": "user", "content": PROMPTS[3]})
        second = cached.generate(Request(messages=turn2, max_new_tokens=10))
        # Whole 32-token blocks of what the turns share are reused. (Mistral's template
        # moves the system prompt into the last user turn, so its turns share little.)
        ids = [
            cached._state.tokens.encode(cached.format_prompt(Request(messages=m)))
            for m in (turn1, turn2)
        ]
        pairs = enumerate(zip(*ids, strict=False))
        common = next((i for i, (x, y) in pairs if x != y), len(ids[0]))
        assert second.metrics.cached_tokens >= common // 32 * 32
        assert family == "mistral" or second.metrics.cached_tokens > 0
    with Engine.load(path, device="cpu", dtype="float32", prefix_cache_mb=0) as plain:
        assert plain.generate(Request(messages=turn1, max_new_tokens=10)).raw_text == first.raw_text
        reference = plain.generate(Request(messages=turn2, max_new_tokens=10))
        assert second.raw_text == reference.raw_text


def test_a_sliding_window_model_matches_generate_alone_and_batched(tiny_model_factory, tmp_path):
    """The cache keeps full layers; the model's mask applies the window (here 8 tokens)."""
    path = tmp_path / "mistral-window"
    shutil.copytree(tiny_model_factory("mistral"), path)
    config = json.loads((path / "config.json").read_text())
    config["sliding_window"] = 8
    (path / "config.json").write_text(json.dumps(config))
    request = Request(prompt="The seven seas sail far away, over and over again.")
    with Engine.load(str(path), device="cpu", prefix_cache_mb=0) as engine:
        ids = engine._state.tokens.encode(engine.format_prompt(request))
        with torch.inference_mode():
            out = engine.model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=16,
                min_new_tokens=16,
                do_sample=False,
                pad_token_id=engine._state.pad_id,
            )
        expected = engine._state.tokens.decode(out[0, len(ids) :].tolist())
        alone = engine.generate(request, max_new_tokens=16, min_new_tokens=16)
        batched = engine.generate_many(
            [Request(prompt="hi"), Request(prompt=request.prompt)],
            max_new_tokens=16,
            min_new_tokens=16,
        )
    assert alone.raw_text == expected
    assert batched[1].raw_text == expected


# ----- step by step


@pytest.fixture
def harness(tiny_model_path):
    return StepHarness(Engine.load(str(tiny_model_path), device="cpu"), chunk_tokens=64)


def test_a_cancelled_row_frees_its_cache_at_the_next_step(harness):
    rows = [harness.submit(_req(i, max_new_tokens=50, min_new_tokens=50)) for i in range(3)]
    while not all(r.tokens for r in rows):  # prompts prefilled, all three decoding
        harness.step()
    kv = harness.loop.kv
    assert kv.rows == 3
    before = kv.nbytes()
    assert rows[1].cancel()
    harness.step()
    assert rows[1].response.finish_reason is FinishReason.CANCELLED
    assert harness.loop.kv.rows == 2
    assert harness.loop.kv.nbytes() < before
    assert [r.status.finished for r in rows] == [False, True, False]
    harness.run(rows)
    assert harness.loop.kv.rows == 0 and harness.loop.kv.nbytes() == 0


def test_a_long_prompt_prefills_in_chunks_while_running_rows_decode(harness):
    short = harness.submit(_req(0, max_new_tokens=300, min_new_tokens=300))
    while not short.tokens:
        harness.step()
    long = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    prompt_len = len(long.prompt_ids)
    assert prompt_len > 4 * 64
    steps = 0
    while not long.tokens:
        before = len(short.tokens)
        forwards = harness.loop.forwards
        harness.step()
        steps += 1
        # one prefill chunk (64 tokens at most) and one decode forward per step, and the
        # running row gets its token at every one of them
        assert harness.loop.forwards - forwards <= 2
        assert len(short.tokens) == before + 1
    assert steps == -(-prompt_len // 64)
    harness.run([short, long])
    assert long.response.ok and short.response.metrics.completion_tokens == 300


def test_a_row_cancelled_while_its_group_is_prefilled_leaves_the_others_exact(harness):
    prompts = ["a fairly long first prompt " * 4, "second " * 9, "third one " * 6]
    expected = [harness.solo(Request(prompt=p, max_new_tokens=6)).raw_text for p in prompts]
    states = [harness.prepare(Request(prompt=p, max_new_tokens=6)) for p in prompts]
    harness.loop._chunk = 400
    harness.loop._admit(states)  # one group of three ...
    harness.loop._chunk = 30  # ... computed 10 columns per step
    harness.step()
    group = harness.loop.prefills[0]
    assert len(group.rows) == 3 and 0 < group.done < group.width
    assert states[0].cancel()  # the longest row, the only one using the first columns
    harness.step()
    assert [len(g.rows) for g in harness.loop.prefills] in ([2], [])
    harness.run(states)
    assert states[0].response.finish_reason is FinishReason.CANCELLED
    assert [s.response.raw_text for s in states[1:]] == expected[1:]


def test_a_short_prompt_is_not_held_up_by_a_long_one_being_prefilled(harness):
    long = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    harness.step()
    harness.step()
    short = harness.submit(Request(prompt="hi there", max_new_tokens=4))
    harness.step()
    assert short.tokens and not long.tokens  # the short prompt went first
    harness.run([long, short])
    assert long.response.ok and short.response.ok


def test_short_prompts_that_keep_arriving_do_not_starve_a_long_one(harness):
    # Shortest prompt first must not mean "never" for the long one: short requests that
    # arrive at every step would otherwise take each step's whole budget.
    long = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    prompt_len = len(long.prompt_ids)
    shorts = []
    steps = 0
    while not long.tokens:
        assert steps <= 2 * -(-prompt_len // 64) + 1, "the long prompt starved"
        # four short prompts (~20 tokens each: more than the 64-token budget together)
        # arrive at every step and are served at once
        shorts += [
            harness.submit(Request(prompt=f"short {steps} {i} " * 5, max_new_tokens=1))
            for i in range(4)
        ]
        harness.step()
        steps += 1
    assert steps > -(-prompt_len // 64)  # the short ones did get a share of the budget
    done = harness.run([long, *shorts])
    assert all(r.ok for r in done)


def test_requests_sent_at_once_are_prefilled_as_one_batch(tiny_model_path):
    harness = StepHarness(Engine.load(str(tiny_model_path), device="cpu"), chunk_tokens=512)
    prompts = [PROMPTS[i % 4] * (1 + i // 4) for i in range(8)]
    states = [harness.submit(Request(prompt=p, max_new_tokens=5)) for p in prompts]
    assert 8 * max(len(s.prompt_ids) for s in states) <= 512
    harness.step()
    # one prefill forward for all eight (short prompts fit the budget), one decode forward
    assert harness.loop.forwards == 2
    assert all(len(s.tokens) == 2 for s in states)
    harness.run(states)
    assert [s.response.metrics.batch_size for s in states] == [8] * 8


# ----- random schedules against solo runs (arrivals, cancels, adapters, lengths)


@pytest.fixture(scope="module")
def solo_outputs():
    return {}


_ADAPTERS = ([], ["a"], ["b"], ["a", "b"])
_EVENT = st.tuples(
    st.integers(0, 6),  # arrival step
    st.integers(0, 3),  # prompt
    st.integers(1, 12),  # max_new_tokens
    st.integers(0, 3),  # adapters
    st.one_of(st.none(), st.integers(1, 8)),  # cancel after this many steps in the loop
)


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(events=st.lists(_EVENT, min_size=2, max_size=6), chunk=st.sampled_from([16, 512]))
def test_random_arrivals_cancels_and_adapters_match_solo_runs(
    tiny_model_path, adapter_dir, solo_outputs, events, chunk
):
    engine = Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir))
    engine.adapters.load("a")
    engine.adapters.load("b")
    h = StepHarness(engine, max_batch_size=4, chunk_tokens=chunk)

    def request(prompt, n, adapters):
        return _req(prompt, max_new_tokens=n, adapters=_ADAPTERS[adapters])

    for _, prompt, n, adapters, _ in events:
        key = (prompt, n, adapters)
        if key not in solo_outputs:
            solo_outputs[key] = h.solo(request(prompt, n, adapters)).raw_text
    assert h.loop.kv.rows == 0
    pending = sorted(enumerate(events), key=lambda e: e[1][0])
    states: dict[int, object] = {}
    admitted_at: dict[int, int] = {}
    step = 0
    while pending or not all(s.done for s in states.values()):
        while pending and pending[0][1][0] <= step:
            i, (_, prompt, n, adapters, _) = pending.pop(0)
            states[i] = h.submit(request(prompt, n, adapters))
        for i, (_, _, _, _, cancel) in enumerate(events):
            s = states.get(i)
            if s is None or cancel is None or s.done:
                continue
            if s.tokens and i not in admitted_at:
                admitted_at[i] = step
            if i in admitted_at and step - admitted_at[i] >= cancel:
                s.cancel()
        h.step()
        step += 1
        assert step < 2000
    for i, (_, prompt, n, adapters, cancel) in enumerate(events):
        resp = states[i].response
        expected = solo_outputs[(prompt, n, adapters)]
        if resp.finish_reason is FinishReason.CANCELLED:
            assert cancel is not None and expected.startswith(resp.raw_text)
        else:
            assert resp.raw_text == expected, (i, events)
    assert h.loop.kv.rows == 0 and not h.loop.prefills


def test_rows_on_an_adapter_that_is_unloaded_end_with_a_clear_error(tiny_model_path, adapter_dir):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        base = _req(1, max_new_tokens=200, min_new_tokens=200, adapters=[])
        expected = engine.generate(base).raw_text
        on_a = _req(0, max_new_tokens=400, min_new_tokens=400, adapters=["a"])
        beside = _req(1, max_new_tokens=200, min_new_tokens=200, adapters=[])
        futs = [engine.submit(on_a), engine.submit(beside)]
        _wait_tokens(engine, on_a.id, 3)
        engine.adapters.unload("a")
        assert futs[0].done()  # resolved before unload() returned
        gone, kept = futs[0].result(60), futs[1].result(60)
    assert gone.finish_reason is FinishReason.ERROR
    assert "'a'" in gone.error and "unloaded" in gone.error
    assert kept.raw_text == expected


def test_a_fused_planning_failure_falls_back_to_peft(tiny_model_path, adapter_dir, monkeypatch):
    from mp13_engine._fused_lora import FusedLora

    requests = [_req(i, adapters=ad) for i, ad in enumerate(([], ["a"], ["b"], ["a"]))]
    with Engine.load(
        str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir), mixed_lora="peft"
    ) as peft:
        peft.adapters.load("a")
        peft.adapters.load("b")
        expected = [r.raw_text for r in peft.generate_many(requests)]

    def broken(self, model, rows):
        raise AttributeError("a PEFT release moved something")

    monkeypatch.setattr(FusedLora, "plan", broken)
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        engine.adapters.load("b")
        got = engine.generate_many([_req(i, adapters=r.adapters) for i, r in enumerate(requests)])
    assert all(r.ok for r in got)
    assert [r.raw_text for r in got] == expected


@pytest.mark.parametrize(
    ("model_type", "ok"),
    [
        ("mistral", True),  # sliding window
        ("gemma2", True),  # full and sliding layers
        ("qwen3_next", False),  # linear attention (recurrent state)
        ("llama4_text", False),  # chunked attention
    ],
)
def test_models_whose_cache_rows_cannot_share_are_refused_clearly(model_type, ok):
    from transformers import AutoConfig

    from mp13_engine import ModelLoadError
    from mp13_engine._kv import check_supported

    config = AutoConfig.for_model(model_type)
    if ok:
        check_supported(config)
    else:
        with pytest.raises(ModelLoadError, match="cache layers of type"):
            check_supported(config)
