# SPDX-License-Identifier: Apache-2.0
"""Every tiny model family: tool format detection, tool conversations, streaming with parsing."""

from __future__ import annotations

import pytest

from mp13_engine import Engine, FinishReason, Request
from mp13_engine.testing import TINY_FAMILIES

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "user", "content": "What is 17*23?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "type": "function",
                "id": "call0000a",
                "function": {"name": "calculator", "arguments": {"expression": "17*23"}},
            }
        ],
    },
    {"role": "tool", "name": "calculator", "content": "391", "tool_call_id": "call0000a"},
]


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_family_tool_conversation_renders_generates_and_streams(tiny_model_factory, family):
    with Engine.load(str(tiny_model_factory(family)), device="cpu") as engine:
        assert engine.tool_format is not None
        req = Request(messages=CONVERSATION, tools=TOOLS, max_new_tokens=12, return_prompt=True)
        prompt = engine.format_prompt(req)
        assert "calculator" in prompt and "391" in prompt
        resp = engine.generate(req)
        assert resp.ok and resp.prompt == prompt
        assert resp.metrics.prompt_tokens == engine.count_tokens(prompt)
        chunks = list(engine.stream(Request(messages=CONVERSATION, tools=TOOLS, max_new_tokens=12)))
        final = chunks[-1].response
        assert final.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        assert "".join(c.text for c in chunks) == final.text
        assert "".join(c.reasoning for c in chunks) == final.reasoning
        assert final.raw_text == resp.raw_text
