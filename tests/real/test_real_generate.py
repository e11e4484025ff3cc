# SPDX-License-Identifier: Apache-2.0
"""A real model through the engine: answers, batches, streams and cancels like itself alone."""

from __future__ import annotations

import pytest

from mp13_engine import FinishReason, Request
from tests.real._prompts import FRANCE

pytestmark = pytest.mark.real

QUESTIONS = ["What is the capital of France?", "Name a primary color.", "What is 2+2?"]


def _ask(question: str, n: int = 10) -> Request:
    return Request(messages=[{"role": "user", "content": question}], max_new_tokens=n)


def test_it_answers_the_capital_of_france(real_engine):
    resp = real_engine.generate(Request(messages=FRANCE, max_new_tokens=16))
    assert resp.finish_reason is FinishReason.STOP
    assert "Paris" in resp.text
    assert resp.metrics.prompt_tokens > 20  # the template's default system prompt is there


def test_the_chat_template_comes_from_the_model(real_engine):
    prompt = real_engine.format_prompt(Request(messages=FRANCE))
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>assistant\n")


def test_greedy_replies_are_the_same_alone_and_in_a_batch(real_engine):
    alone = [real_engine.generate(_ask(q)) for q in QUESTIONS]
    batch = real_engine.generate_many([_ask(q) for q in QUESTIONS])
    assert [r.raw_text for r in batch] == [r.raw_text for r in alone]
    assert all(r.ok for r in batch) and all(r.metrics.batch_size == 3 for r in batch)
    assert len({r.text for r in batch}) == 3  # three different real answers


def test_streamed_chunks_join_to_the_reply(real_engine):
    request = Request(messages=FRANCE, max_new_tokens=16)
    chunks = list(real_engine.stream(request))
    final = chunks[-1].response
    assert chunks[-1].done and final.finish_reason is FinishReason.STOP
    assert "".join(c.text for c in chunks) == final.text
    assert len([c for c in chunks if c.text]) > 3  # it really streamed, token by token
    assert final.text == real_engine.generate(Request(messages=FRANCE, max_new_tokens=16)).text


def test_cancel_stops_a_reply_and_keeps_its_start(real_engine):
    question = "Write a long story about a dragon who learns to bake bread."
    full = real_engine.generate(_ask(question, 40))
    stream = real_engine.stream(_ask(question, 400))
    seen = ""
    cancelled = False
    for chunk in stream:
        seen += chunk.text
        if len(seen) > 10 and not cancelled:
            cancelled = real_engine.cancel(stream.id)
            assert cancelled
    resp = stream.result(timeout=60)
    assert resp.finish_reason is FinishReason.CANCELLED
    assert 0 < resp.metrics.completion_tokens < 400
    assert full.text.startswith(resp.text)
