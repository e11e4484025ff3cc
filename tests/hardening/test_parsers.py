# SPDX-License-Identifier: MIT
"""Tool-call parsers on hostile output and on formats users register: never raise.

New cases of the hardening campaign: every built-in format and a user-registered one
fed rendered calls with hostile arguments (closing tags and stop markers inside strings,
5,000-digit numbers, 3,000 open brackets, NUL, lone surrogates), mutated and cut at
random, split into random deltas: zero exceptions, streaming equals whole-text. And user
formats whose decoder misbehaves the way user code does (returns dicts, one ``ToolCall``
instead of a list, an int; raises ``SystemExit``): before, ``parse`` raised
``TypeError`` or handed dicts out as tool calls, and a decoder's ``SystemExit`` stopped
the engine's worker thread, failing every request of the engine for good.
"""

from __future__ import annotations

import functools
import json
import random

import pytest

from mp13_engine import Engine, Request, toolcalls
from mp13_engine.toolcalls import Opener, Profile
from mp13_toolbox import ToolCall

HOSTILE = [
    "1" * 5000,
    "[" * 3000,
    "{" * 300 + "}" * 300,
    "\x00",
    "\udcff",
    "🎉",
    "\\u0000",
    '"',
    "\\",
    "NaN",
    "1e400",
    "</tool_call>",
    "<tool_call>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "```",
    "<think>",
    "</think>",
    "<|im_end|>",
    "\r",
    "\u2028",
]


def _tagged(open_: str, close: str) -> Profile:
    """A user format: ``open_`` JSON-list-of-calls ``close`` (like the README's example)."""

    def decode(payload, ctx):
        return toolcalls.calls_from_json(payload, name_keys=("tool_name",))

    def render(calls):
        items = [{"tool_name": c.name, "arguments": c.arguments} for c in calls]
        return open_ + json.dumps(items, ensure_ascii=False) + close

    return Profile(
        name="user_fmt",
        openers=(Opener(open_, ends=(close,), quoted='"'),),
        decode=decode,
        render=render,
    )


def _arguments(rng: random.Random) -> dict:
    pick = rng.random()
    if pick < 0.2:
        return {}
    if pick < 0.8:
        return {"a": rng.choice([*HOSTILE, "x", 1, 1.5, None, True, [1, 2], {"k": "v"}])}
    return {"deep": functools.reduce(lambda a, _: [a], range(rng.choice([5, 50])), [])}


def _fuzz_format(fmt: str, seed: int, count: int) -> int:
    rng = random.Random(seed)
    checked = 0
    for _ in range(count):
        calls = [
            ToolCall(rng.choice(["f", "get_weather", "a.b", "名前"]), _arguments(rng), id="c")
            for _ in range(rng.randint(1, 3))
        ]
        text = toolcalls.render_calls(calls, fmt)
        text = rng.choice(["", "Sure. ", "<think>hm</think>", *HOSTILE]) + text
        text += rng.choice(["", " done", *HOSTILE])
        if rng.random() < 0.3:
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(HOSTILE) + text[at + rng.randint(0, 5) :]
        if rng.random() < 0.1:
            text = text[: rng.randrange(len(text) + 1)]
        whole = toolcalls.parse(text, fmt)
        stream = toolcalls.StreamParser(fmt)
        at = 0
        while at < len(text):
            step = rng.choice([1, 1, 2, 3, 7, 50, 1000])
            stream.feed(text[at : at + step])
            at += step
        streamed = stream.finish()
        assert (streamed.content, streamed.reasoning, streamed.tool_calls) == (
            whole.content,
            whole.reasoning,
            whole.tool_calls,
        ), (fmt, text[:300])
        assert all(isinstance(c, ToolCall) for c in whole.tool_calls)
        checked += 1
    return checked


@pytest.mark.parametrize("fmt", toolcalls.formats())
def test_hostile_arguments_in_every_format_never_raise_and_stream_as_whole(fmt):
    assert _fuzz_format(fmt, seed=len(fmt), count=15) == 15


def test_a_registered_format_fuzzes_like_a_built_in():
    with toolcalls.register_format(_tagged("<<call>>", "<</call>>")):
        assert _fuzz_format("user_fmt", seed=1, count=60) == 60


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [*toolcalls.formats(), "user_fmt"])
def test_hostile_arguments_long_run(fmt):
    with toolcalls.register_format(_tagged("<<call>>", "<</call>>")):
        assert _fuzz_format(fmt, seed=99, count=400) == 400


def _raise(exc: BaseException):
    def decode(payload, ctx):
        raise exc

    return decode


class _NoStr(Exception):
    def __str__(self) -> str:
        raise ValueError("no str")


MISBEHAVING = {
    "returns a dict": lambda payload, ctx: {"name": "x"},
    "returns dicts": lambda payload, ctx: [{"name": "x"}],
    "returns an int": lambda payload, ctx: 5,
    "returns strings": lambda payload, ctx: ["x"],
    "raises SystemExit": _raise(SystemExit(2)),
    "raises GeneratorExit": _raise(GeneratorExit()),
    "raises an error without str": _raise(_NoStr()),
    "raises ValueError": _raise(ValueError("bad payload")),
}


def _user_format(decode, name: str = "misbehaving") -> Profile:
    return Profile(
        name=name,
        openers=(Opener("<<", ends=(">>",)),),
        decode=decode,
        render=lambda calls: "<<x>>",
    )


@pytest.mark.parametrize("kind", list(MISBEHAVING))
def test_a_misbehaving_user_decoder_is_a_parse_error_not_an_exception(kind):
    text = "before <<payload>> after"
    with toolcalls.register_format(_user_format(MISBEHAVING[kind])):
        whole = toolcalls.parse(text, "misbehaving")
        stream = toolcalls.StreamParser("misbehaving")
        for piece in ("before <<pay", "load>> af", "ter"):
            stream.feed(piece)
        streamed = stream.finish()
    assert whole == streamed
    assert whole.tool_calls == () and whole.content == text
    assert len(whole.errors) == 1 and "could not decode tool call" in whole.errors[0]


def test_a_decoder_returning_one_call_instead_of_a_list_is_read():
    one = lambda payload, ctx: ToolCall("ping", {"n": 1})  # noqa: E731
    with toolcalls.register_format(_user_format(one)):
        assert toolcalls.parse("<<p>>", "misbehaving").tool_calls == (ToolCall("ping", {"n": 1}),)


@pytest.mark.parametrize("kind", ["raises SystemExit", "returns dicts"])
def test_a_misbehaving_user_format_never_stops_the_engine(tiny_factory, kind):
    # An opener of one common letter: the tiny model's random text opens "calls" often.
    profile = Profile(
        name="evil",
        openers=(Opener("e", ends=("a",)),),
        decode=MISBEHAVING[kind],
        render=lambda calls: "exa",
    )
    requests = [Request(prompt=f"hello {i} " * 3, max_new_tokens=40) for i in range(6)]
    path = str(tiny_factory("smollm2"))
    with Engine.load(path, device="cpu", prefix_cache_mb=0) as plain:
        expected = [r.raw_text for r in plain.generate_many(requests)]
    with (
        toolcalls.register_format(profile),
        Engine.load(path, device="cpu", tool_format="evil", prefix_cache_mb=0) as engine,
    ):
        out = engine.generate_many(requests)
        assert [r.raw_text for r in out] == expected
        assert all(r.ok and r.tool_calls == () for r in out)
        assert any("could not decode tool call" in e for r in out for e in r.parse_errors)
        assert not engine.closed and engine.generate(requests[0]).raw_text == expected[0]
