# SPDX-License-Identifier: MIT
"""Bad input to the engine: typed errors that say what to do, and the engine keeps serving.

New cases of the hardening campaign (issue 11): message tool fields in shapes the chat
templates cannot read, tools given without ``parameters``, lone surrogates anywhere in
the text (a file name from ``os.listdir`` in a tool result), values whose ``repr``
raises, and a seeded fuzz of odd chats on every tiny family. Building a ``Request`` may
raise ``RequestError``; rendering and counting may raise ``Mp13Error``; ``generate``
never raises for any of it, and the engine stays open.
"""

from __future__ import annotations

import contextlib
import random

import pytest

from mp13_engine import Engine, Mp13Error, Request, RequestError
from mp13_engine.testing import TINY_FAMILIES


@pytest.fixture(scope="module")
def engines(tiny_factory):
    opened = {}
    yield lambda family: opened.setdefault(
        family, Engine.load(str(tiny_factory(family)), device="cpu", prefix_cache_mb=1)
    )
    for engine in opened.values():
        engine.close()


def _chat(assistant: dict, tool: dict | None = None) -> list[dict]:
    tool = tool or {"role": "tool", "content": "42", "tool_call_id": "call1"}
    return [{"role": "user", "content": "add"}, {"role": "assistant", **assistant}, tool]


_CALL = {"type": "function", "id": "call1", "function": {"name": "add", "arguments": {}}}


@pytest.mark.parametrize(
    ("assistant", "tool", "says"),
    [
        ({"content": "", "tool_calls": "oops"}, None, "tool_calls is a list"),
        ({"content": "", "tool_calls": [None]}, None, "tool call 0"),
        ({"content": "", "tool_calls": [{"function": None}]}, None, "tool call 0"),
        ({"content": "", "tool_calls": {"function": {"name": "f"}}}, None, "tool_calls is a list"),
        ({"content": "", "tool_calls": [{**_CALL, "id": 5}]}, None, "an id is a string"),
        (
            {"content": "", "tool_calls": [{"function": {"name": 5, "arguments": {}}}]},
            None,
            "name string",
        ),
        (
            {"content": "", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]},
            None,
            "arguments are",
        ),
        (  # JSON text that is not JSON would reach the model as arguments {}
            {"content": "", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1,}'}}]},
            None,
            "arguments are a dict or its JSON text",
        ),
        (
            {"content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1, 2]"}}]},
            None,
            "arguments are a dict or its JSON text",
        ),
        (
            {"content": "", "tool_calls": [_CALL]},
            {"role": "tool", "content": "42", "tool_call_id": 7},
            "tool_call_id",
        ),
        ({"content": "hi", "name": ["me"]}, None, "name"),
    ],
)
def test_tool_fields_the_templates_cannot_read_are_refused_where_the_request_is_built(
    assistant, tool, says
):
    with pytest.raises(RequestError, match=says) as caught:
        Request(messages=_chat(assistant, tool))
    assert caught.value.field == "messages"


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tools_without_parameters_or_description_render_on_every_family(engines, family):
    engine = engines(family)
    bare = [{"name": "ping"}, {"type": "function", "function": {"name": "pong"}}]
    request = Request(messages=[{"role": "user", "content": "hi"}], tools=bare, max_new_tokens=2)
    assert [t["function"]["parameters"] for t in request.tools] == [
        {"type": "object", "properties": {}}
    ] * 2
    assert "ping" in engine.format_prompt(request) and "pong" in engine.format_prompt(request)
    assert engine.generate(request).ok


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_a_lone_surrogate_anywhere_is_fed_as_the_replacement_character(engines, family):
    engine = engines(family)
    listing = "report.txt\ncaf\udce9.txt"  # os.listdir on a non-UTF-8 file name
    messages = [
        {"role": "user", "content": "list the files \ud800"},
        {"role": "assistant", "content": "", "tool_calls": [_CALL]},
        {"role": "tool", "content": listing, "tool_call_id": "call1"},
    ]
    tools = [{"name": "ls", "description": "lists files in d\udcff"}]
    request = Request(messages=messages, tools=tools, max_new_tokens=3)
    prompt = engine.format_prompt(request)
    assert "caf\ufffd.txt" in prompt and "\udce9" not in prompt
    assert engine.count_tokens(request) == engine.count_tokens(prompt)
    assert engine.generate(request).ok
    assert engine.generate(Request(prompt="raw \udcff text", max_new_tokens=2)).ok
    assert engine.count_tokens("a\udcffb") == engine.count_tokens("a\ufffdb")


class _BrokenRepr:
    def __repr__(self) -> str:
        raise ValueError("no repr")


@pytest.mark.parametrize("field", ["temperature", "top_k", "stop", "adapters", "tools", "seed"])
def test_a_value_whose_repr_raises_still_gets_the_field_error(field):
    with pytest.raises(RequestError, match=field):
        Request(prompt="hi", **{field: _BrokenRepr()})


# ----- a seeded fuzz of odd chats on every family


def _odd_chat(rng: random.Random, specials: list[str]) -> dict:
    def text() -> str:
        parts = []
        for _ in range(rng.randint(0, 4)):
            pick = rng.random()
            if pick < 0.3:
                parts.append(rng.choice(specials))
            elif pick < 0.45:
                parts.append(rng.choice(["{{", "{%", "\x00", "\u202e", "</tool_call>", "\udcff"]))
            elif pick < 0.5:
                parts.append("w" * rng.choice([0, 1, 3000]))
            else:
                parts.append(rng.choice(["hello", "", " ", "日本語"]))
        return "".join(parts)

    def content():
        return rng.choice(
            [text(), text(), None, [{"type": "text", "text": text()}], [{}], [{"type": "text"}]]
        )

    def calls():
        return rng.choice(
            [
                [
                    {
                        **_CALL,
                        "function": {"name": "f", "arguments": rng.choice([{}, "{", '{"a":1}'])},
                    }
                ],
                [{"function": {"name": "f"}}],
                [{"name": text(), "arguments": {text(): text()}}],
                [],
                "oops",
                [None],
                [{"function": {"name": "f"}, "id": 3}],
            ]
        )

    roles = ["system", "user", "assistant", "tool", "user", "assistant", "developer", "ipython"]
    messages = []
    for _ in range(rng.randint(1, 5)):
        message = {"role": rng.choice(roles), "content": content()}
        if message["role"] == "assistant" and rng.random() < 0.5:
            message["tool_calls"] = calls()
        if message["role"] == "tool" and rng.random() < 0.5:
            message["tool_call_id"] = rng.choice(["call1", 5, None, text()])
        messages.append(message)
    tools = rng.choice(
        [None, [{"name": "g"}], {"name": "h", "description": text()}, [{"function": {}}]]
    )
    fields = {"messages": messages, "tools": tools, "max_new_tokens": 2}
    if rng.random() < 0.1:
        fields["chat_template_kwargs"] = rng.choice(
            [{"enable_thinking": False}, {"foo": text()}, {"bos_token": "<x>"}, {"tools": []}]
        )
    return fields


def _fuzz_chats(engine, seed: int, count: int) -> dict[str, int]:
    tok = engine.tokenizer
    specials = sorted(
        {*tok.all_special_tokens, *(t.content for t in tok.added_tokens_decoder.values())}
    )
    rng = random.Random(seed)
    seen = {"refused": 0, "served": 0, "failed": 0}
    for _ in range(count):
        fields = _odd_chat(rng, specials)
        try:
            request = Request(**fields)
        except RequestError:
            seen["refused"] += 1
            continue
        for render in (engine.format_prompt, engine.count_tokens):
            with contextlib.suppress(Mp13Error):
                render(request)
        response = engine.generate(request)  # never raises
        seen["served" if response.ok else "failed"] += 1
        assert response.ok or response.error
    assert not engine.closed
    return seen


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_odd_chats_give_typed_errors_on_every_family(engines, family):
    seen = _fuzz_chats(engines(family), seed=TINY_FAMILIES.index(family), count=40)
    assert sum(seen.values()) == 40
    assert engines(family).generate("still serving?", max_new_tokens=2).ok


@pytest.mark.slow
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_odd_chats_long_run(engines, family):
    seen = _fuzz_chats(engines(family), seed=7, count=1000)
    assert seen["served"] > 0 and seen["refused"] > 0
