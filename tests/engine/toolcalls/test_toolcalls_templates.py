# SPDX-License-Identifier: Apache-2.0
"""Real chat templates: format detection, and calls surviving a trip through the template.

Round trip: a call parsed from model output -> ``prepare_chat`` with the
template's probed support (what the engine does) -> rendered by the real
template (transformers' jinja renderer, imported lazily) -> the assistant part
cut out -> parsed again -> the same call (name, arguments, and id where the
format carries ids). A template without tool support is used with the default
format. Templates are read from tests/templates
(shipped with the tests) and from the tiny test families in mp13_engine.testing.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from mp13_engine import toolcalls
from mp13_toolbox import ToolCall
from tests._shared import SHARED_TEMPLATES
from tests.engine.toolcalls._toolcalls_cases import (
    TOOLS,
    assistant_part,
    prepare_for,
    render_template,
)

SHARED = SHARED_TEMPLATES
# Located without importing mp13_engine.testing (which imports torch).
TINY = pathlib.Path(importlib.util.find_spec("mp13_engine.testing").origin).parent / "_templates"

EXPECTED = {
    "deepseek_v3": "deepseek_v3",
    "deepseek_v31": "deepseek_v31",
    "gemma3_pythonic": "pythonic",
    "glm45": "glm45",
    "granite": "granite",
    "granite_20b_fc": "granite_20b_fc",
    "hermes": "hermes",
    "llama3_json": "llama3_json",
    "mistral": "mistral",
    "phi4_mini": "phi4_mini",
    "phi4_mini_llamacpp": "phi4_mini",
    "phi4_mini_own": "phi4_mini",
    "qwen3": "hermes",
    "qwen3_coder": "qwen3_coder",
    "smollm2": None,  # no tool support: the engine uses DEFAULT_FORMAT
}
# Real templates that trl ships (tool-capable ones), when trl is installed.
_TRL_SPEC = importlib.util.find_spec("trl")
TRL = pathlib.Path(_TRL_SPEC.origin).parent / "chat_templates" if _TRL_SPEC else None
TRL_EXPECTED = {
    "deepseek_r1_distill": "deepseek_v3",
    "deepseekv3": "deepseek_v3",
    "glm4moe": "glm45",
    "gptoss": "harmony",
    "llama3_1": "llama3_json",
    "llama3_2": "llama3_json",
    "nemotron_3_nano": "qwen3_coder",
    "qwen2_5": "hermes",
    "qwen3": "hermes",
    "qwen3_5_think": "qwen3_coder",
    "qwen3_instruct_2507": "hermes",
    "qwen3_vl": "hermes",
}
TINY_EXPECTED = {
    "chatml": "hermes",
    "granite": "granite",
    "llama3": "llama3_json",
    "mistral": "mistral",
    "qwen3": "hermes",
}


def _templates() -> list[tuple[pathlib.Path, str]]:
    out = [(TINY / f"{stem}.jinja", fmt) for stem, fmt in TINY_EXPECTED.items()]
    out += [(SHARED / f"{stem}.jinja", fmt) for stem, fmt in EXPECTED.items()]
    if TRL is not None:
        out += [(TRL / f"{stem}.jinja", fmt) for stem, fmt in TRL_EXPECTED.items()]
    return out


def _read(path: pathlib.Path) -> str:
    return path.read_text()


@pytest.mark.parametrize(("path", "fmt"), _templates(), ids=lambda v: getattr(v, "stem", v))
def test_detect_format(path, fmt):
    assert toolcalls.detect_format(_read(path)) == fmt


def test_every_shared_template_has_an_expected_format():
    assert sorted(p.stem for p in SHARED.glob("*.jinja")) == sorted(EXPECTED)


def test_detect_format_without_tool_support():
    assert toolcalls.detect_format("{% for m in messages %}{{ m.content }}{% endfor %}") is None
    assert toolcalls.detect_format(None) is None


CALL = ToolCall(
    "get_weather",
    {"city": "São Paulo", "days": 3, "zip": "007", "metric": True, "extra": {"a": [1, "b"]}},
    "a1B2c3D4e",
)


@pytest.mark.parametrize(("path", "fmt"), _templates(), ids=lambda v: getattr(v, "stem", v))
def test_call_round_trips_through_the_real_template(path, fmt):
    template = _read(path)
    fmt = fmt or toolcalls.DEFAULT_FORMAT
    output = "Checking. " + toolcalls.render_calls([CALL], fmt)
    first = toolcalls.parse(output, fmt, TOOLS)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [(CALL.name, CALL.arguments)]
    canonical = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": c.id or "call_1", "type": "function", "function": c.to_openai()["function"]}
            for c in first.tool_calls
        ],
    }
    messages = [{"role": "user", "content": "Weather in São Paulo?"}, canonical]
    prepared, tools = prepare_for(template, fmt, messages)
    part = assistant_part(template, prepared, tools)
    again = toolcalls.parse(part, fmt, TOOLS)
    assert [(c.name, c.arguments) for c in again.tool_calls] == [(CALL.name, CALL.arguments)]
    assert again.errors == ()
    if first.tool_calls[0].id is not None:
        assert again.tool_calls[0].id == first.tool_calls[0].id


@pytest.mark.parametrize(("path", "fmt"), _templates(), ids=lambda v: getattr(v, "stem", v))
def test_tool_results_render_after_calls(path, fmt):
    template = _read(path)
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "name": "get_weather", "content": "RAIN-42"},
    ]
    prepared, tools = prepare_for(template, fmt, messages)
    rendered = render_template(template, prepared, True, tools)
    assert "RAIN-42" in rendered
    assert "Oslo" in rendered
    assert "get_weather" in rendered.split("Oslo")[0]  # the tool specs reach the prompt too


def test_parallel_calls_survive_a_template_that_takes_one_call_per_message():
    template = _read(SHARED / "llama3_json.jinja")
    calls = [ToolCall("get_weather", {"city": "Oslo"}), ToolCall("get_weather", {"city": "Rome"})]
    canonical = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", **c.to_openai()} for i, c in enumerate(calls)],
    }
    messages = [{"role": "user", "content": "Weather?"}, canonical]
    part = assistant_part(template, toolcalls.prepare_messages(messages, "llama3_json"))
    again = toolcalls.parse(part, "llama3_json", TOOLS)
    assert [(c.name, c.arguments) for c in again.tool_calls] == [
        (c.name, c.arguments) for c in calls
    ]
