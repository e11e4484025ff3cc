# SPDX-License-Identifier: Apache-2.0
"""The shared conformance suite: every rule of the parse, run over every format."""

from __future__ import annotations

import json

import pytest

from mp13_engine import toolcalls
from mp13_toolbox import ToolCall
from tests.engine.toolcalls._toolcalls_cases import (
    BUILTIN_FORMATS,
    EMPTY,
    FORMATS,
    NESTED,
    RAW_TEXT,
    REAL,
    TOOLS,
    USER_FORMAT,
    WEATHER,
    calls_tuple,
    profile_of,
    render,
)


def _names_args(calls):
    return [(c.name, c.arguments) for c in calls]


def _markup(fmt: str) -> list[str]:
    p = toolcalls.get_profile(fmt)
    tags = [o.pattern for o in p.openers if not o.regex]
    tags += [t for o in p.openers for t in o.ends]
    tags += list(p.wrappers) + list(p.stops)
    tags += [t for pair in p.reasoning for t in pair]
    return tags


def test_every_required_format_is_registered():
    required = [
        "hermes",
        "qwen3_coder",
        "llama3_json",
        "pythonic",
        "llama4_pythonic",
        "mistral",
        "mistral_v11",
        "granite",
        "granite_20b_fc",
        "phi4_mini",
        "deepseek_v3",
        "deepseek_v31",
        "glm45",
        "kimi_k2",
        "harmony",
        "gemma_tool_code",
        "functiongemma",
        "internlm",
        "jamba",
        "xlam",
        "minimax",
        "minimax_m2",
        "seed_oss",
    ]
    assert sorted(required) == BUILTIN_FORMATS
    assert toolcalls.formats() == sorted([*required, USER_FORMAT.name])  # see conftest


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_call(fmt):
    out = toolcalls.parse("The answer is 42.", fmt)
    assert out == toolcalls.ParsedOutput(content="The answer is 42.")


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_call(fmt):
    out = toolcalls.parse(render([WEATHER], fmt), fmt)
    assert _names_args(out.tool_calls) == [("get_weather", {"city": "Paris", "days": 3})]
    assert out.content == ""
    assert out.errors == ()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_call_to_a_tool_not_in_the_request_is_returned_not_dropped(fmt):
    # tools= types raw-text values; it never filters: running an unknown tool is the
    # toolbox's call (it refuses it and says so), not the parser's
    text = render([NESTED, WEATHER], fmt)
    with_tools = toolcalls.parse(text, fmt, TOOLS)  # lists get_weather, not search
    assert _names_args(with_tools.tool_calls) == _names_args([NESTED, WEATHER])
    assert with_tools == toolcalls.parse(text, fmt)
    assert with_tools.errors == ()


@pytest.mark.parametrize("fmt", FORMATS)
def test_parallel_calls(fmt):
    calls = [WEATHER, ToolCall("get_weather", {"city": "Rome", "days": 1}), EMPTY]
    out = toolcalls.parse(render(calls, fmt), fmt)
    assert _names_args(out.tool_calls) == _names_args(calls)
    assert out.errors == ()


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_around_calls_and_stop_markers(fmt):
    profile = toolcalls.get_profile(fmt)
    text = "Let me check that.\n" + render([WEATHER], fmt) + "\nDone." + profile.stops[0]
    out = toolcalls.parse(text, fmt)
    assert _names_args(out.tool_calls) == _names_args([WEATHER])
    assert out.content.startswith("Let me check that.")
    assert out.content.endswith("Done.")
    for tag in _markup(fmt):
        assert tag not in out.content


@pytest.mark.parametrize("fmt", FORMATS)
def test_nested_and_unicode_arguments(fmt):
    out = toolcalls.parse(render([NESTED], fmt), fmt)
    assert _names_args(out.tool_calls) == _names_args([NESTED])


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_arguments(fmt):
    out = toolcalls.parse(render([EMPTY], fmt), fmt)
    assert _names_args(out.tool_calls) == [("ping", {})]
    assert isinstance(out.tool_calls[0].arguments, dict)


@pytest.mark.parametrize("fmt", FORMATS)
def test_string_encoded_arguments(fmt):
    text = render([WEATHER], fmt)
    encoded = json.dumps(WEATHER.arguments, ensure_ascii=False)
    if encoded not in text:
        pytest.skip(f"{fmt} does not write arguments as one JSON value")
    out = toolcalls.parse(text.replace(encoded, json.dumps(encoded)), fmt)
    assert _names_args(out.tool_calls) == _names_args([WEATHER])


@pytest.mark.parametrize("fmt", sorted(set(FORMATS) - RAW_TEXT))
def test_malformed_payload_keeps_text_and_records_error(fmt):
    bad = render([WEATHER], fmt).replace('"Paris"', "Paris").replace("'Paris'", "Paris")
    out = toolcalls.parse("Before. " + bad + " After.", fmt)
    assert out.tool_calls == ()
    assert len(out.errors) == 1 and fmt in out.errors[0]
    assert "Paris" in out.content
    assert out.content.startswith("Before.") and out.content.endswith("After.")


_RAW_MALFORMED = {
    "qwen3_coder": "<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
    "seed_oss": "<seed:tool_call>\n<parameter=city>Paris</parameter>\n</seed:tool_call>",
    "glm45": "<tool_call>\n<arg_value>Paris</arg_value>\n</tool_call>",
    "minimax_m2": "<minimax:tool_call>\n<invoke>Paris</minimax:tool_call>",
    "functiongemma": "<start_function_call>call:get_weather{city:<escape>Paris}<end_function_call>",
}


@pytest.mark.parametrize("fmt", sorted(RAW_TEXT))
def test_malformed_raw_text_payload(fmt):
    out = toolcalls.parse("Before. " + _RAW_MALFORMED[fmt] + " After.", fmt)
    assert out.tool_calls == ()
    assert len(out.errors) == 1
    assert "Paris" in out.content and out.content.startswith("Before.")


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_payload_never_yields_a_partial_call(fmt):
    text = render([NESTED], fmt)
    cut = text.index("naïve") + 3
    out = toolcalls.parse("Intro. " + text[:cut], fmt)
    assert out.tool_calls == ()
    assert len(out.errors) == 1
    assert "naï" in out.content and out.content.startswith("Intro.")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_prefix_gives_whole_calls_only(fmt):
    text = render([WEATHER, NESTED], fmt)
    expected = _names_args([WEATHER, NESTED])
    for cut in range(0, len(text) + 1, 3):
        got = _names_args(toolcalls.parse(text[:cut], fmt).tool_calls)
        assert got == expected[: len(got)], (cut, text[:cut])


@pytest.mark.parametrize(("fmt", "index"), [(f, i) for f in FORMATS for i in range(len(REAL[f]))])
def test_every_prefix_of_a_real_output_gives_whole_calls_only(fmt, index):
    text, calls, _ = REAL[fmt][index]
    for cut in range(len(text) + 1):
        got = calls_tuple(toolcalls.parse(text[:cut], fmt).tool_calls)
        assert got == calls[: len(got)], (cut, text[:cut])


@pytest.mark.parametrize("fmt", [f for f in FORMATS if profile_of(f).reasoning])
def test_markup_inside_reasoning_is_a_draft(fmt):
    open_tag, close_tag = toolcalls.get_profile(fmt).reasoning[0]
    draft = render([ToolCall("draft_tool", {"x": 1})], fmt)
    text = f"{open_tag}I could call {draft} maybe.{close_tag}\nAnswer first. " + render(
        [WEATHER], fmt
    )
    out = toolcalls.parse(text, fmt)
    assert _names_args(out.tool_calls) == _names_args([WEATHER])
    assert "draft_tool" in out.reasoning and out.reasoning.startswith("I could call")
    assert out.content == "Answer first."


@pytest.mark.parametrize("fmt", [f for f in FORMATS if profile_of(f).close_only_reasoning])
def test_reasoning_opened_by_the_prompt(fmt):
    open_tag, close_tag = toolcalls.get_profile(fmt).reasoning[0]
    text = f"Let me think.{close_tag}\n\nThe answer." + render([WEATHER], fmt)
    auto = toolcalls.parse(text, fmt)
    told = toolcalls.parse(text, fmt, in_reasoning=True)
    assert auto == told
    assert auto.reasoning == "Let me think." and auto.content == "The answer."
    assert len(auto.tool_calls) == 1
    assert toolcalls.prompt_opens_reasoning(f"<|x|>assistant\n{open_tag}\n", fmt)
    plain = toolcalls.parse(f"No reasoning here.{close_tag} ok", fmt, in_reasoning=False)
    assert plain.reasoning == "" and close_tag not in plain.content


def test_harmony_channels():
    text = (
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary"
        "<|message|>Calling the tool.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
    )
    out = toolcalls.parse(text, "harmony")
    assert out.reasoning == "Think."
    assert out.content == "Calling the tool."
    assert _names_args(out.tool_calls) == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize(("fmt", "index"), [(f, i) for f in FORMATS for i in range(len(REAL[f]))])
def test_real_outputs(fmt, index):
    text, calls, content = REAL[fmt][index]
    out = toolcalls.parse(text, fmt)
    assert calls_tuple(out.tool_calls) == calls
    assert out.content == content
    assert out.errors == ()


def _closing_tags(fmt: str) -> list[str]:
    """Every marker that ends (or cuts) a call of ``fmt``, plus other formats' usual closers."""
    p = profile_of(fmt)
    tags = {t for o in p.openers for t in o.ends} | set(p.stops)
    return sorted(tags | {"</tool_call>", "]", "}", ")", "```", "</function>"})


@pytest.mark.parametrize(("fmt", "tag"), [(f, t) for f in FORMATS for t in _closing_tags(f)])
def test_a_closing_tag_quoted_in_an_argument_is_read_whole(fmt, tag):
    """A snippet that mentions the format's own closing tag does not end the call early."""
    call = ToolCall("write_file", {"text": f'if "{tag}" in line:\n    stop()', "n": 2})
    text = "Intro. " + render([call, EMPTY], fmt) + " Outro."
    whole = toolcalls.parse(text, fmt)
    assert _names_args(whole.tool_calls) == _names_args([call, EMPTY])
    assert whole.errors == ()
    stream = toolcalls.StreamParser(fmt)
    for ch in text:
        stream.feed(ch)
    assert stream.finish() == whole


@pytest.mark.parametrize(
    ("fmt", "bad", "good"),
    [
        (
            "hermes",
            '<tool_call>{"name": "a", "arguments": {"q": "it"s"}}</tool_call>',
            '<tool_call>{"name": "ping", "arguments": {}}</tool_call>',
        ),
        (
            "jamba",
            '<tool_calls>[{"name": "a", "arguments": {"q": "5" tall"}}]</tool_calls>',
            '<tool_calls>[{"name": "ping", "arguments": {}}]</tool_calls>',
        ),
        (
            "gemma_tool_code",
            "```tool_code\nprint(a(q='it's'))\n```",
            "```tool_code\nprint(ping())\n```",
        ),
    ],
)
def test_stray_quotes_cost_only_the_call_they_break(fmt, bad, good):
    """Quoted-tag reading must not swallow the next call when the model's quoting is wrong."""
    out = toolcalls.parse(f"{bad}\nThen: {good}", fmt)
    assert _names_args(out.tool_calls) == [("ping", {})]
    assert len(out.errors) == 1 and out.content.startswith(bad)
    cut = toolcalls.parse(f"{bad} and some words", fmt)
    assert cut.tool_calls == () and cut.content == f"{bad} and some words"
