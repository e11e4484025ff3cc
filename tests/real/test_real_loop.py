# SPDX-License-Identifier: Apache-2.0
"""The step loop on a real model: a reply does not depend on how its request was batched.

Greedy replies of SmolLM2-135M-Instruct are the same alone, in a batch whose
rows leave at different times, joining a batch mid-way (in a packed step), computed in small
prefill chunks, and on a prefix-cache hit (the next turn of a conversation).
"""

from __future__ import annotations

import time

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
    deadline = time.monotonic() + 60
    while len(getattr(real_engine._inflight.get(first.id), "tokens", ())) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.001)
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
