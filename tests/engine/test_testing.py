# SPDX-License-Identifier: Apache-2.0
"""Tests of ``mp13_engine.testing``: offline tiny models are deterministic, loadable, usable.

Templates: the tiny families' own chat templates must render exactly what the real upstream
templates do. The real ones live in ``/work/shared/templates`` (test data outside the repo; the
tests skip when it is absent). Both are rendered by transformers' own renderer with the same
tokenizer. Documented normalisation, for granite only: the upstream Granite 3.3 template prints
an assistant message's ``content`` and the raw role, so before rendering with it, assistant
``tool_calls`` are written into ``content`` as ``<|tool_call|>[...]`` and role ``tool`` becomes
``tool_response`` (what our template does itself). For chatml, upstream Hermes needs a tools list,
so "no tools" is passed to it as ``[]`` (ours accepts ``None`` too).
"""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mp13_engine import ConfigError
from mp13_engine.testing import TINY_FAMILIES, build_tiny_model, build_tokenizer


def _digests(path: pathlib.Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def test_same_seed_gives_byte_identical_files(tmp_path: pathlib.Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    assert _digests(a) == _digests(b)
    assert _digests(a)["model.safetensors"] != _digests(c)["model.safetensors"]
    assert _digests(a)["tokenizer.json"] == _digests(c)["tokenizer.json"]


def test_build_leaves_global_rng_untouched(tmp_path: pathlib.Path) -> None:
    before = torch.random.get_rng_state()
    build_tiny_model(tmp_path / "m")
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.parametrize(
    ("kwargs", "word"), [({"family": "nope"}, "family"), ({"size": "xl"}, "size")]
)
def test_unknown_family_or_size_is_a_config_error(
    tmp_path: pathlib.Path, kwargs: dict[str, str], word: str
) -> None:
    with pytest.raises(ConfigError, match=word) as info:
        build_tiny_model(tmp_path, **kwargs)
    assert "chatml" in str(info.value) or "tiny" in str(info.value)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_family_loads_offline_and_generates(tiny_model_factory, family: str) -> None:
    path = tiny_model_factory(family)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 5)
    assert model.config.vocab_size == len(tok)


# --- chat templates against the real ones -----------------------------------------------

REAL_DIR = pathlib.Path(__file__).resolve().parents[3] / "shared" / "templates"
if not REAL_DIR.is_dir():  # the checkout may sit elsewhere; the shared folder is at /work
    REAL_DIR = pathlib.Path("/work/shared/templates")

REAL = {
    "chatml": "hermes.jinja",
    "qwen3": "qwen3.jinja",
    "llama3": "llama3_json.jinja",
    "mistral": "mistral.jinja",
    "granite": "granite.jinja",
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "u"},
                "days": {"type": "array", "items": {"type": "integer"}, "description": " n "},
            },
            "required": ["location"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "current_time",
        "description": "Return the current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _call(name: str, args: dict, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


SYSTEM = {"role": "system", "content": "You are a terse assistant."}
TOOL_ROUND = [
    SYSTEM,
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("get_weather", {"location": "Paris", "unit": "celsius"}, "call00001")],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": '{"temperature": 21}'},
    {"role": "assistant", "content": "It is 21 degrees."},
    {"role": "user", "content": "Thanks! And the time, ünïcödé 🎉?"},
]
TWO_CALLS = [
    {"role": "user", "content": "Weather and time?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            _call("get_weather", {"location": "Oslo"}, "call00002"),
            _call("current_time", {}, "call00003"),
        ],
    },
    {"role": "tool", "tool_call_id": "call00002", "content": "snow"},
    {"role": "tool", "tool_call_id": "call00003", "content": "12:30"},
]
PLAIN = [
    SYSTEM,
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]
USER_ONLY = [{"role": "user", "content": "Hi"}]

# (id, messages, tools, extra template kwargs)
CASES = [
    ("tool-round", TOOL_ROUND, [WEATHER, CLOCK], {}),
    ("two-calls", TWO_CALLS, [WEATHER, CLOCK], {}),
    ("plain", PLAIN, None, {}),
    ("plain-with-tools", PLAIN, [CLOCK], {}),
    ("user-only", USER_ONLY, None, {}),
]
SKIP = {
    # Llama 3 supports exactly one call per assistant turn (the real template raises).
    ("llama3", "two-calls"),
}


def _granite_upstream_messages(messages: list[dict]) -> list[dict]:
    out = []
    for message in copy.deepcopy(messages):
        if message.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in message.pop("tool_calls")
            ]
            text = (message.get("content") or "") + "<|tool_call|>" + json.dumps(calls)
            message["content"] = text
        if message["role"] == "tool":
            message["role"] = "tool_response"
        out.append(message)
    return out


def _render(tok, messages, tools, template=None, **kwargs) -> str:
    return tok.apply_chat_template(
        messages,
        tools=tools,
        tokenize=False,
        add_generation_prompt=True,
        chat_template=template,
        **kwargs,
    )


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/templates (real templates) not present")
@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize(("case", "messages", "tools", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_template_matches_the_real_one(family, case, messages, tools, kwargs) -> None:
    if (family, case) in SKIP:
        pytest.skip("not supported by this family's real format")
    tok = build_tokenizer(family)
    real_text = (REAL_DIR / REAL[family]).read_text(encoding="utf-8")
    real_messages = _granite_upstream_messages(messages) if family == "granite" else messages
    # Upstream Hermes iterates ``tools`` unguarded: "no tools" is an empty list there.
    real_tools = [] if family == "chatml" and tools is None else tools
    ours = _render(tok, messages, tools, **kwargs)
    real = _render(tok, real_messages, real_tools, template=real_text, **kwargs)
    assert ours == real


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/templates (real templates) not present")
@pytest.mark.parametrize(
    "kwargs", [{}, {"enable_thinking": False}], ids=["thinking", "no-thinking"]
)
def test_qwen3_reasoning_matches_the_real_one(kwargs) -> None:
    tok = build_tokenizer("qwen3")
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "add again"},
    ]
    real_text = (REAL_DIR / "qwen3.jinja").read_text(encoding="utf-8")
    for upto in (3, 4):
        ours = _render(tok, messages[:upto], None, **kwargs)
        assert ours == _render(tok, messages[:upto], None, template=real_text, **kwargs)


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/templates (real templates) not present")
def test_llama3_tools_in_system_message_matches_the_real_one() -> None:
    tok = build_tokenizer("llama3")
    real_text = (REAL_DIR / "llama3_json.jinja").read_text(encoding="utf-8")
    kwargs = {"tools_in_user_message": False, "date_string": "01 Jan 2025"}
    ours = _render(tok, TOOL_ROUND, [WEATHER], **kwargs)
    assert ours == _render(tok, TOOL_ROUND, [WEATHER], template=real_text, **kwargs)
    assert "Today Date: 01 Jan 2025" in ours
