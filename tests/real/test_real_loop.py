# SPDX-License-Identifier: Apache-2.0
"""The step loop on a real model: a reply does not depend on how its request was batched.

Greedy replies of SmolLM2-135M-Instruct are the same alone, in a batch whose
rows leave at different times, joining a batch mid-way (in a packed step, also when the
rows use different LoRA adapters), computed in small prefill chunks, and on a
prefix-cache hit (the next turn of a conversation).
"""

from __future__ import annotations

import time

import attrs
import pytest

from mp13_engine import Engine, Request
from tests.real._prompts import FRANCE

pytestmark = pytest.mark.real

QUESTIONS = ["Name a primary color.", "What is 2+2?", "Tell me about the moon."]
LENGTHS = (6, 10, 24)


def _ask(i: int) -> Request:
    return Request(
        messages=[{"role": "user", "content": QUESTIONS[i]}],
        max_new_tokens=LENGTHS[i],
        min_new_tokens=LENGTHS[i],
    )


@pytest.fixture(scope="module")
def plain(smollm2_path):
    """No prefix cache, and prompts computed 16 tokens per step."""
    with Engine.load(
        smollm2_path, device="cpu", dtype="float32", prefix_cache_mb=0, prefill_chunk_tokens=16
    ) as engine:
        yield engine


def test_replies_are_the_same_alone_batched_joining_and_chunked(real_engine, plain):
    alone = [plain.generate(_ask(i)).raw_text for i in range(3)]
    assert [r.raw_text for r in real_engine.generate_many([_ask(i) for i in range(3)])] == alone
    first = _ask(2)
    fut = real_engine.submit(first)
    _wait_for_tokens(real_engine, first, 4)
    packed = real_engine._loop.packed
    late = [real_engine.submit(_ask(i)) for i in (0, 1)]
    joined = [fut.result(120).raw_text] + [f.result(120).raw_text for f in late]
    assert joined == [alone[2], alone[0], alone[1]]
    assert real_engine._loop.packed > packed  # the late prompts ran beside the decoding row


def test_the_next_turn_reuses_the_cache_and_replies_the_same(real_engine, plain):
    first = real_engine.generate(Request(messages=FRANCE, max_new_tokens=16))
    turn2 = [*FRANCE, {"role": "assistant", "content": first.text}]
    turn2.append({"role": "user", "content": "And of Italy?"})
    second = real_engine.generate(Request(messages=turn2, max_new_tokens=16))
    reference = plain.generate(Request(messages=turn2, max_new_tokens=16))
    assert second.metrics.cached_tokens >= first.metrics.prompt_tokens // 32 * 32 > 0
    assert second.raw_text == reference.raw_text
    assert "Rome" in second.text


def _wait_for_tokens(engine: Engine, request: Request, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(getattr(engine._inflight.get(request.id), "tokens", ())) < n:
        assert time.monotonic() < deadline
        time.sleep(0.001)


@pytest.fixture(scope="module")
def adapted(smollm2_path, tmp_path_factory):
    """SmolLM2 with two random LoRA adapters of different ranks and targets."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("real-adapters")
    for name, seed, config in (
        ("a", 1, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)),
        ("b", 2, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False)),
    ):
        base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            get_peft_model(base, config).save_pretrained(root / name)
    with Engine.load(
        smollm2_path, device="cpu", dtype="float32", prefix_cache_mb=0, adapters_dir=str(root)
    ) as engine:
        engine.adapters.load("a")
        engine.adapters.load("b")
        yield engine


def test_rows_on_different_adapters_join_in_packed_steps(adapted):
    """The fused LoRA weights spread per token: a mixed step packs, each reply as alone."""
    asks = [
        attrs.evolve(_ask(i), adapters=adapters)
        for i, adapters in ((2, ["a"]), (0, []), (1, ["b"]))
    ]
    alone = [
        adapted.generate(attrs.evolve(r, id=f"alone-{i}")).raw_text for i, r in enumerate(asks)
    ]
    assert alone[0] != adapted.generate(_ask(2)).raw_text  # the adapter changes the reply
    fut = adapted.submit(asks[0])
    _wait_for_tokens(adapted, asks[0], 4)
    packed = adapted._loop.packed
    late = [adapted.submit(r) for r in asks[1:]]
    joined = [fut.result(120).raw_text] + [f.result(120).raw_text for f in late]
    assert joined == alone
    assert adapted._loop.packed > packed  # base and "b" prompts ran beside the row on "a"
