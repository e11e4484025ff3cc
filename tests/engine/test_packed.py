# SPDX-License-Identifier: Apache-2.0
"""Packed steps: prompt chunks and running rows in one forward (``mp13_engine._packed``).

What they must keep: every request's greedy tokens equal its solo run (rows joining,
chunked prompts, a sliding window, a prefix-cache hit, mixed adapters), each batch's cache
equal to what its own forward gives, and a loop that goes on unpacked, losing nothing,
when the model cannot run packed or a packed forward fails.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from mp13_engine import Engine, Request
from mp13_engine._forward import ModelCall
from mp13_engine._kv import BatchKV
from mp13_engine._packed import PACK_KWARG, PackedCache, PackingUnsupported, Part, packed_attention
from mp13_engine._types import BASE_ADAPTER
from mp13_engine.testing import TINY_FAMILIES
from tests.engine._loop_harness import StepHarness

# (arrival step, prompt, max_new_tokens): a row decoding, a long prompt prefilled in
# chunks beside it, then two prompts at once (one group) while both run.
SCHEDULE = [
    (0, "Hello there, how are you today?", 14),
    (2, "Tell me about the seven seas and the quick brown fox " * 3, 8),
    (4, "x", 10),
    (4, "Count to three please, slowly", 6),
]


def _model(tiny_model_factory, tmp_path, family: str) -> str:
    if family != "mistral-window":
        return str(tiny_model_factory(family))
    path = tmp_path / "mistral-window"  # every row outgrows an 8-token window
    shutil.copytree(tiny_model_factory("mistral"), path)
    config = json.loads((path / "config.json").read_text())
    config["sliding_window"] = 8
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _run(h: StepHarness, schedule=SCHEDULE, **fields) -> list[str]:
    """Each entry ``(step, prompt, max_new_tokens[, adapters])`` arrives at its step."""
    pending = list(schedule)
    states = []
    step = 0
    while pending or not all(s.done for s in states):
        while pending and pending[0][0] <= step:
            _, prompt, n, *adapters = pending.pop(0)
            own = {"adapters": adapters[0]} if adapters else {}
            request = Request(prompt=prompt, max_new_tokens=n, **own, **fields)
            states.append(h.submit(request))
        h.step()
        step += 1
        assert step < 500
    assert all(s.response.ok for s in states), [s.response.error for s in states]
    return [s.response.raw_text for s in states]


def _harness(path: str, packed: bool = True, **config) -> StepHarness:
    engine = Engine.load(path, device="cpu", dtype="float32", prefix_cache_mb=0, **config)
    return StepHarness(engine, chunk_tokens=24, packed=packed)


@pytest.mark.parametrize("family", [*TINY_FAMILIES, "mistral-window"])
def test_rows_joining_in_packed_steps_match_their_solo_runs(tiny_model_factory, tmp_path, family):
    path = _model(tiny_model_factory, tmp_path, family)
    plain = _harness(path, packed=False)
    solo = [plain.solo(Request(prompt=p, max_new_tokens=n)).raw_text for _, p, n in SCHEDULE]
    assert _run(plain) == solo
    assert plain.loop.packed == 0

    packed = _harness(path)
    assert _run(packed) == solo
    # the long prompt's chunks and the later group ran beside the decoding rows
    assert packed.loop.packed >= 3
    assert packed.loop.forwards < plain.loop.forwards
    assert packed.loop.kv.rows == 0 and not packed.loop.prefills


def test_a_prefix_cache_hit_and_a_fresh_prompt_pack_with_running_rows(tiny_model_path):
    engine = Engine.load(str(tiny_model_path), device="cpu", dtype="float32")
    h = StepHarness(engine, chunk_tokens=512, prefix_cache_mb=16)
    shared = "You are a patient assistant who answers in two short sentences. " * 3
    first = h.solo(Request(prompt=shared + "What is a cat?", max_new_tokens=6)).raw_text
    again = Request(prompt=shared + "What is a cat?", max_new_tokens=6)
    schedule = [(0, "Hello there", 12), (1, again.prompt, 6), (1, "Count slowly", 5)]
    texts = _run(h, schedule)
    assert texts[1] == first
    assert h.loop.packed >= 1
    plain = _harness(str(tiny_model_path), packed=False)
    assert texts == [
        plain.solo(Request(prompt=p, max_new_tokens=n)).raw_text for _, p, n in schedule
    ]


# Each row's adapter: the decode batch's three rows, then the prompt batch's two.
_ROW_ADAPTERS = {
    "base": [BASE_ADAPTER] * 5,
    "mixed": ["a", BASE_ADAPTER, "b", "b", "a"],
}


@pytest.mark.parametrize("rows", list(_ROW_ADAPTERS))
def test_each_batch_gets_the_cache_and_logits_of_its_own_forward(
    tiny_model_path, adapter_dir, rows
):
    names = _ROW_ADAPTERS[rows]
    engine = Engine.load(
        str(tiny_model_path), device="cpu", dtype="float32", adapters_dir=str(adapter_dir)
    )
    if rows == "mixed":
        engine.adapters.load("a")
        engine.adapters.load("b")
    call = ModelCall(engine._state, lambda: engine.adapters)
    vocab = engine.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)

    def decode_batch() -> BatchKV:  # three rows of different lengths, right-aligned
        parts = []
        for name, n in zip(names[:3], (9, 3, 14), strict=True):
            kv = BatchKV(lens=[0])
            ids = torch.randint(0, vocab, (1, n), generator=gen)
            mask, pos = kv.inputs([n], torch.device("cpu"))
            call([name], ids, mask, pos, kv.cache)
            kv.advance([n])
            parts.append(kv)
        return BatchKV.concat(parts)

    with torch.inference_mode():
        base = decode_batch()
        step = torch.randint(0, vocab, (3, 1), generator=gen)
        prompt = torch.randint(0, vocab, (2, 7), generator=gen)
        new = [7, 4]  # the second prompt is left-padded by 3

        def separate(kv: BatchKV, ids, n, rows) -> torch.Tensor:
            mask, pos = kv.inputs(n, torch.device("cpu"))
            out = call(rows, ids, mask, pos, kv.cache)
            kv.advance(n)
            return out

        copies = [BatchKV.concat([base.take(i) for i in range(3)]) for _ in range(2)]
        expected = torch.cat(
            [
                separate(copies[0], step, [1, 1, 1], names[:3]),
                separate(fresh := BatchKV(lens=[0, 0]), prompt, new, names[3:]),
            ]
        )
        parts = [
            Part(copies[1], step, [1, 1, 1], True),
            Part(BatchKV(lens=[0, 0]), prompt, new, True),
        ]
        cache = PackedCache(parts, torch.device("cpu"))
        got = call.packed(names, cache)
        for part in parts:
            part.kv.advance(part.new)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in ((parts[0].kv, copies[0]), (parts[1].kv, fresh)):
        assert mine.lens == theirs.lens
        for i in range(mine.rows):
            for (k1, v1), (k2, v2) in zip(mine.row_layers(i), theirs.row_layers(i), strict=True):
                torch.testing.assert_close(k1, k2, rtol=1e-4, atol=1e-5)
                torch.testing.assert_close(v1, v2, rtol=1e-4, atol=1e-5)
    assert engine.model.config._attn_implementation != "mp13_packed"  # restored


def test_attention_the_packed_path_cannot_honour_is_refused():
    part = Part(BatchKV(lens=[0]), torch.zeros(1, 2, dtype=torch.long), [2], True)
    cache = PackedCache([part], torch.device("cpu"))

    class Layer:
        layer_idx = 0
        is_causal = True

    q = torch.zeros(1, 2, 2, 4)
    with pytest.raises(PackingUnsupported, match="softcap"):
        packed_attention(Layer(), q, q, q, None, softcap=30.0, **{PACK_KWARG: cache})
    with pytest.raises(PackingUnsupported, match="keywords"):
        packed_attention(Layer(), q, q, q, None)  # a model that drops the forward's keywords
    with pytest.raises(PackingUnsupported, match="without updating"):
        packed_attention(Layer(), q, q, q, None, **{PACK_KWARG: cache})
    with pytest.raises(PackingUnsupported, match="outside"):
        cache.check()  # no layer updated the cache: attention ran elsewhere


def test_a_model_that_cannot_run_packed_is_served_unpacked(tiny_model_path, monkeypatch, caplog):
    """Found out after a whole forward: every cache is rolled back, the step runs unpacked."""
    plain = _harness(str(tiny_model_path), packed=False)
    expected = _run(plain)

    def refuse(self):
        raise PackingUnsupported("attention computed elsewhere")

    monkeypatch.setattr(PackedCache, "check", refuse)
    h = _harness(str(tiny_model_path))
    with caplog.at_level(logging.INFO, logger="mp13_engine._loop"):
        assert _run(h) == expected
    assert h.loop.packed == 0 and not h.loop._pack
    assert "cannot run packed" in caplog.text
    assert h.loop.forwards == plain.loop.forwards + 1  # the one failed try


def test_failing_packed_forwards_lose_nothing_and_stop_packing(tiny_model_path, monkeypatch):
    plain = _harness(str(tiny_model_path), packed=False)
    expected = _run(plain)
    calls = []

    def broken(self, name, cache):
        calls.append(name)
        raise RuntimeError("a packed forward failed")

    monkeypatch.setattr(ModelCall, "packed", broken)
    h = _harness(str(tiny_model_path))
    assert _run(h) == expected  # each step retried unpacked
    assert len(calls) == 3 and not h.loop._pack


# (arrival step, prompt, max_new_tokens, adapters): rows on "a", the base and "b" join
# while others decode; the last two arrive together, one prefill group of two adapters.
MIXED = [
    (0, "Hello there, how are you today?", 12, ["a"]),
    (2, "Count to three please, slowly", 6, []),
    (3, "Tell me about the seven seas", 9, ["b"]),
    (3, "x", 7, ["a"]),
]


def _two_adapter_engine(path, adapters_dir, **config) -> Engine:
    engine = Engine.load(
        str(path), device="cpu", dtype="float32", adapters_dir=str(adapters_dir), **config
    )
    engine.adapters.load("a")
    engine.adapters.load("b")
    return engine


@pytest.mark.parametrize("mixed_lora", ["fused", "peft"])
def test_rows_on_different_adapters_pack_when_the_fused_path_serves_them(
    tiny_model_path, adapter_dir, mixed_lora
):
    """Fused: the plan's per-row weights are spread per token; PEFT's loop: not packed."""
    results = {}
    for packed in (False, True):
        engine = _two_adapter_engine(
            tiny_model_path, adapter_dir, prefix_cache_mb=0, mixed_lora=mixed_lora
        )
        h = StepHarness(engine, chunk_tokens=24, packed=packed)
        results[packed] = (_run(h, MIXED), h.loop.packed, h.loop.forwards)
    assert results[True][0] == results[False][0]
    if mixed_lora == "fused":
        assert results[True][1] >= 2 and results[True][2] < results[False][2]
    else:
        assert results[True][1] == 0  # PEFT tells rows apart by batch row: separate forwards
    solo = StepHarness(_two_adapter_engine(tiny_model_path, adapter_dir, prefix_cache_mb=0))
    expected = [
        solo.solo(Request(prompt=prompt, max_new_tokens=n, adapters=adapters)).raw_text
        for _, prompt, n, adapters in MIXED
    ]
    assert results[True][0] == expected
