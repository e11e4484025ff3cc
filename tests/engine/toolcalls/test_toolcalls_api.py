# SPDX-License-Identifier: Apache-2.0
"""Public surface, registry errors, torch-freedom, messages going back, value conversion."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from mp13_engine import ToolFormatError, toolcalls
from mp13_engine.toolcalls import _raw_values
from mp13_toolbox import ToolCall, ToolSpec
from tests.engine.toolcalls._toolcalls_cases import FORMATS, TOOLS


def test_public_names_are_pinned():
    assert toolcalls.__all__ == [
        "COMMON_STOPS",
        "DEFAULT_FORMAT",
        "ContentDelta",
        "DecodeContext",
        "FormatHandle",
        "MessageStyle",
        "Opener",
        "ParsedOutput",
        "PayloadError",
        "Profile",
        "ReasoningDelta",
        "StreamEvent",
        "StreamParser",
        "Switch",
        "TemplateSupport",
        "ToolCallCompleted",
        "calls_from_json",
        "detect_format",
        "formats",
        "get_profile",
        "parse",
        "prepare_chat",
        "prepare_messages",
        "prompt_opens_reasoning",
        "register_format",
        "render_calls",
        "template_support",
        "tools_system_prompt",
        "unregister_format",
    ]


def test_importing_every_format_needs_no_torch():
    code = (
        "import sys\n"
        "from mp13_engine import toolcalls\n"
        "for f in toolcalls.formats(): toolcalls.parse('x', f)\n"
        "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_format_lists_the_known_ones():
    with pytest.raises(ToolFormatError) as info:
        toolcalls.get_profile("nope")
    assert "hermes" in str(info.value) and "qwen3_coder" in str(info.value)
    with pytest.raises(ToolFormatError):
        toolcalls.StreamParser("nope")
    with pytest.raises(ToolFormatError):
        toolcalls.parse("x", "nope")


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("hermse", "hermes"), ("Hermes", "hermes"), ("hermes ", "hermes"), ("pythonik", "pythonic")],
)
def test_a_misspelt_format_name_gets_the_name_it_was_meant_to_be(typed, meant):
    with pytest.raises(ToolFormatError, match=rf"did you mean '{meant}'\?"):
        toolcalls.parse("x", typed)


@pytest.mark.parametrize("family", ["qwen3", "llama3", "gpt-oss", "nope"])
def test_a_model_family_name_is_not_mistaken_for_a_typo(family):
    # qwen3 is close to qwen3_coder, yet Qwen3 itself writes hermes: suggesting it would mislead
    with pytest.raises(ToolFormatError) as info:
        toolcalls.get_profile(family)
    assert "did you mean" not in str(info.value)
    assert "named by wire syntax" in str(info.value) and "detect it" in str(info.value)


def test_names_are_bare_and_ids_kept():
    out = toolcalls.parse(
        '<tool_call>{"name": "functions.get_weather:1", "arguments": {}, "id": "c1"}</tool_call>',
        "hermes",
    )
    assert out.tool_calls == (ToolCall("get_weather", {}, "c1"),)


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json", "mistral"])
def test_numbers_json_lacks_come_back_as_the_text_the_model_wrote(fmt):
    # Python's JSON parser takes NaN and Infinity (and turns 1e999 into one): kept as
    # floats, they made the recorded call's arguments, and a conversation's export, not
    # JSON. They stay the model's text, which validation then refuses as not a number.
    args = '{"a": NaN, "b": [Infinity, -Infinity, 1e999, 1.5], "c": 2}'
    text = {
        "hermes": f'<tool_call>{{"name": "f", "arguments": {args}}}</tool_call>',
        "llama3_json": f'{{"name": "f", "parameters": {args}}}',
        "mistral": f'[TOOL_CALLS][{{"name": "f", "arguments": {args}}}]',
    }[fmt]
    out = toolcalls.parse(text, fmt)
    assert out.errors == ()
    (call,) = out.tool_calls
    assert call.arguments == {"a": "NaN", "b": ["Infinity", "-Infinity", "1e999", 1.5], "c": 2}
    json.dumps(call.to_openai(), allow_nan=False)  # strict JSON


def test_hermes_accepts_complete_json_without_closing_tag_only():
    ok = toolcalls.parse('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n', "hermes")
    assert ok.tool_calls == (ToolCall("f", {"a": 1}),) and ok.errors == ()
    cut = toolcalls.parse('<tool_call>\n{"name": "f", "arguments": {"a": 1', "hermes")
    assert cut.tool_calls == () and len(cut.errors) == 1


def test_raw_text_values_follow_the_schema():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n1234\n</parameter>\n"
        "<parameter=zip>\n007\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        '<parameter=metric>\nTrue\n</parameter>\n<parameter=extra>\n{"a": [1]}\n</parameter>\n'
        "</function>\n</tool_call>"
    )
    typed = toolcalls.parse(text, "qwen3_coder", TOOLS).tool_calls[0].arguments
    assert typed == {"city": "1234", "zip": "007", "days": 3, "metric": True, "extra": {"a": [1]}}
    guessed = toolcalls.parse(text, "qwen3_coder").tool_calls[0].arguments
    assert guessed == {"city": 1234, "zip": "007", "days": 3, "metric": True, "extra": {"a": [1]}}


@pytest.mark.parametrize(
    ("raw", "schema", "value"),
    [
        ("42", {"type": "string"}, "42"),
        ("42", {"type": "integer"}, 42),
        ("4.0", {"type": "integer"}, 4),
        ("4.5", {"type": "number"}, 4.5),
        ("abc", {"type": "integer"}, "abc"),
        ("false", {"type": "boolean"}, False),
        ("null", {"type": ["integer", "null"]}, None),
        ("7", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, 7),
        ("[1, 2]", {"type": "array"}, [1, 2]),
        ("{'a': True}", {"type": "object"}, {"a": True}),
        (" text ", None, " text "),
        ('"quoted"', None, '"quoted"'),
        ("1e400", None, "1e400"),
        # A value that does not fit its schema type is kept as the model wrote it (guessed).
        ("4.5", {"type": "integer"}, 4.5),
        ("maybe", {"type": "boolean"}, "maybe"),
        ("no", {"type": "boolean"}, False),
        ("nothing", {"type": "null"}, "nothing"),
        ("[1]", {"type": "object"}, [1]),
        ("{'a': 1}", {"type": "array"}, {"a": 1}),
        ("7", {"type": "decimal"}, 7),  # a type JSON Schema does not have
        # enum without "type": the enum values' types decide.
        ("2", {"enum": [1, 2]}, 2),
        ("2", {"enum": ["1", "2"]}, "2"),
        ("true", {"enum": [True, None]}, True),
    ],
)
def test_convert_value(raw, schema, value):
    assert _raw_values.convert_value(raw, schema) == value


def test_python_literals_never_evaluate_code():
    out = toolcalls.parse("[f(a=__import__('os').getcwd())]", "pythonic")
    assert out.tool_calls == () and len(out.errors) == 1
    ok = toolcalls.parse("[f(a=(1, 2), b={'k': None}, c=-1.5, d=null)]", "pythonic")
    assert ok.tool_calls[0].arguments == {"a": [1, 2], "b": {"k": None}, "c": -1.5, "d": None}


def test_a_windows_path_in_a_python_call_prints_no_warning():
    """``'C:\\Apps'`` is an invalid escape sequence to Python, which warns about it (shown
    by default from 3.12): a model's text must not print warnings on the user's console,
    nor become a parse error where warnings are errors."""
    code = (
        "from mp13_engine import toolcalls\n"
        "p = toolcalls.parse(r\"[f(path='C:\\Apps')]\", 'pythonic')\n"
        "g = toolcalls.parse(\"```tool_code\\nprint(f(path='C:\\\\Apps'))\\n```\",\n"
        "    'gemma_tool_code')\n"
        "print([c.arguments for c in p.tool_calls + g.tool_calls], p.errors, g.errors)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stderr == ""
    assert done.stdout.strip() == r"[{'path': 'C:\\Apps'}, {'path': 'C:\\Apps'}] () ()"


def test_gemma_positional_arguments_use_schema_order():
    text = "```tool_code\nprint(get_weather('Paris', 2))\n```"
    out = toolcalls.parse(text, "gemma_tool_code", TOOLS)
    assert out.tool_calls[0].arguments == {"city": "Paris", "days": 2}
    # A spec without a name describes no tool: it is skipped, the named ones still apply.
    nameless = {"type": "function", "function": {"description": "no name"}}
    out = toolcalls.parse(text, "gemma_tool_code", [nameless, *TOOLS])
    assert out.tool_calls[0].arguments == {"city": "Paris", "days": 2}
    assert toolcalls.parse(text, "gemma_tool_code").tool_calls[0].arguments == {
        "arg0": "Paris",
        "arg1": 2,
    }


def test_tools_accept_toolspec_values():
    spec = ToolSpec("get_weather", "w", TOOLS[0]["function"]["parameters"])
    text = "<tool_call>get_weather\n<arg_key>zip</arg_key>\n<arg_value>01</arg_value>\n</tool_call>"
    assert toolcalls.parse(text, "glm45", [spec]).tool_calls[0].arguments == {"zip": "01"}


_CANONICAL = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0001",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "rain"},
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_prepare_messages_does_not_touch_its_input(fmt):

    before = copy.deepcopy(_CANONICAL)
    out = toolcalls.prepare_messages(_CANONICAL, fmt)
    assert before == _CANONICAL
    assert len(out) == 3 and out[0] == _CANONICAL[0]
    none_ok = toolcalls.get_profile(fmt).messages.content_none is None
    assert isinstance(out[1]["content"], str) or (none_ok and out[1]["content"] is None)


def test_prepare_messages_mistral_ids_are_nine_alphanumerics_and_consistent():
    out = toolcalls.prepare_messages(_CANONICAL, "mistral")
    call_id = out[1]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum()
    assert out[2]["tool_call_id"] == call_id


def test_prepare_messages_argument_shapes():
    v31 = toolcalls.prepare_messages(_CANONICAL, "deepseek_v31")[1]["tool_calls"][0]
    assert v31["function"]["arguments"] == '{"city": "Oslo"}'
    v3 = toolcalls.prepare_messages(_CANONICAL, "deepseek_v3")[1]["tool_calls"][0]
    assert v3["function"]["arguments"] == {"city": "Oslo"}
    granite = toolcalls.prepare_messages(_CANONICAL, "granite")[1]
    assert "tool_calls" not in granite
    assert toolcalls.parse(granite["content"], "granite").tool_calls[0].name == "get_weather"
    kimi = toolcalls.prepare_messages(_CANONICAL, "kimi_k2")
    assert kimi[1]["tool_calls"][0]["id"] == "functions.get_weather:0"
    assert kimi[2]["tool_call_id"] == "functions.get_weather:0"


@pytest.mark.parametrize(
    ("calls", "match"),
    [
        ([{"function": {"name": "f", "arguments": '{"city": "Paris",}'}}], "invalid JSON"),
        ([{"function": {"name": "f", "arguments": "[1, 2]"}}], "got list"),
        ([{"function": {"arguments": {"a": 1}}}], "has no name"),
        ([{"function": {"name": "", "arguments": {}}}], "has no name"),
        ([{"function": "f"}], "has no name"),
        ({"function": {"name": "f"}}, "tool_calls is a list of call dicts"),
    ],
)
def test_a_past_call_that_cannot_be_rendered_faithfully_is_refused(calls, match):
    # it used to reach the model as {"name": "f", "arguments": {}}: a call it never made
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": calls}]
    for fmt in ("hermes", "mistral_v11", "deepseek_v31"):
        with pytest.raises(ToolFormatError, match=match) as info:
            toolcalls.prepare_chat(chat, None, fmt)
        assert str(info.value).startswith("message 1")
    empty = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [
                {"function": {"name": "f", "arguments": ""}},
                {"function": {"name": "g"}},
            ],
        },
    ]
    prepared = toolcalls.prepare_messages(empty, "hermes")[1]["tool_calls"]
    assert [c["function"]["arguments"] for c in prepared] == [{}, {}]  # no arguments: {}


@pytest.mark.parametrize("fmt", FORMATS)
def test_tools_system_prompt_shows_specs_and_a_parsable_example(fmt):
    text = toolcalls.tools_system_prompt(TOOLS, fmt)
    assert text.startswith("# Tools") and '"get_weather"' in text
    example = text.split("(several calls may follow each other):\n", 1)[1]
    calls = toolcalls.parse(example, fmt).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("function_name", {"argument": "value"})]


def test_tools_system_prompt_without_tools_is_no_block_at_all():
    """No tools: nothing to describe, so no empty ``<tools>`` block and no call syntax."""
    assert toolcalls.tools_system_prompt([], "hermes") == ""
    assert toolcalls.tools_system_prompt(iter(()), "mistral") == ""
    # The format is still checked: a typo is said even before the first tool is added.
    with pytest.raises(ToolFormatError, match="did you mean 'hermes'"):
        toolcalls.tools_system_prompt([], "hermse")


def test_llama3_json_in_prose_needs_parameters_to_be_a_call():
    prose = toolcalls.parse('Use {"name": "x"} as the format.', "llama3_json")
    assert prose.tool_calls == () and prose.content == 'Use {"name": "x"} as the format.'
    tagged = toolcalls.parse('<|python_tag|>{"name": "x"}', "llama3_json")
    assert tagged.tool_calls == (ToolCall("x", {}),)


def test_qwen3_coder_tolerates_only_a_missing_outer_closing_tag():
    whole = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>"
    assert toolcalls.parse(whole, "qwen3_coder").tool_calls == (ToolCall("f", {"a": 1}),)
    cut = toolcalls.parse(whole[: -len("\n</function>")], "qwen3_coder")
    assert cut.tool_calls == () and "truncated" in cut.errors[0]


def test_harmony_accepts_a_body_whose_call_token_was_cut_by_the_engine():
    text = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}'
    assert toolcalls.parse(text, "harmony").tool_calls == (ToolCall("f", {"a": 1}),)
    empty = toolcalls.parse("<|channel|>commentary to=functions.f <|message|>", "harmony")
    assert empty.tool_calls == () and len(empty.errors) == 1


def test_gemma_results_merge_into_one_user_turn():
    messages = [
        *_CANONICAL[:2],
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_0002", "name": "get_weather", "content": "sun"},
        {"role": "user", "content": "thanks"},
    ]
    out = toolcalls.prepare_messages(messages, "gemma_tool_code")
    assert [m["role"] for m in out] == ["user", "assistant", "user", "user"]
    assert out[2]["content"] == "```tool_output\nrain\n```\n```tool_output\nsun\n```"


def test_a_call_token_without_payload_is_dropped_and_reported():
    out = toolcalls.parse("[TOOL_CALLS] sorry, no tool fits.", "mistral")
    assert out.content == "sorry, no tool fits." and out.tool_calls == ()
    assert len(out.errors) == 1 and "[TOOL_CALLS]" in out.errors[0]
    word = toolcalls.parse("functools is a module.", "phi4_mini")
    assert word == toolcalls.ParsedOutput(content="functools is a module.")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: toolcalls.parse(5, "hermes"),
            "the model output a tool-call parser reads is a str",
        ),
        (lambda: toolcalls.StreamParser("hermes").feed(b"x"), "is a str, not bytes"),
        (lambda: toolcalls.detect_format(5), "the chat template detect_format reads is a str"),
        (lambda: toolcalls.prompt_opens_reasoning(None, "hermes"), "is a str, not NoneType"),
        (lambda: toolcalls.parse("x", "hermes", tools=5), "tools is a list of tool specs"),
        (lambda: toolcalls.parse("x", "hermes", tools={"name": "f"}), "tools is a list"),
        (lambda: toolcalls.parse("x", "hermes", in_reasoning="yes"), "in_reasoning is True"),
        (lambda: toolcalls.render_calls(ToolCall("f", {}), "hermes"), "a list of ToolCall"),
        (lambda: toolcalls.render_calls([{"name": "f"}], "hermes"), "a list of ToolCall"),
    ],
)
def test_wrong_types_are_tool_format_errors(call, match):
    """Wrong-typed input is refused with a ToolFormatError that names what is expected
    (it used to be a TypeError or AttributeError from inside, or a silent misreading)."""
    with pytest.raises(ToolFormatError, match=match):
        call()
    # None as a chat template is "no template", not an error.
    assert toolcalls.detect_format(None) is None


_DS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>"
_DS_END = "<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>"
_DS_SEP = "<\uff5ctool\u2581sep\uff5c>"


@pytest.mark.parametrize(
    ("fmt", "markup", "problem"),
    [
        ("deepseek_v3", f"{_DS_BEGIN}function{_DS_SEP}f\n```json\n{{}}\n{_DS_END}", "unterminated"),
        (
            "deepseek_v3",
            f"{_DS_BEGIN}function{_DS_SEP}\n```json\n{{}}\n```{_DS_END}",
            "missing function name",
        ),
        ("deepseek_v31", f'{_DS_BEGIN}f{{"a": 1}}{_DS_END}', "expected NAME"),
        (
            "functiongemma",
            '<start_function_call>call:f{a:"Pa}<end_function_call>',
            "bad quoted string",
        ),
        (
            "functiongemma",
            "<start_function_call>call:f{a:}<end_function_call>",
            "a value is missing",
        ),
        ("functiongemma", "<start_function_call>call:f{a,b:3}<end_function_call>", "bad key 'a,b'"),
        ("gemma_tool_code", "```tool_code\nx = f(a=1)\n```", "tool_code may only contain calls"),
        (
            "glm45",
            "<tool_call>f\n<arg_key>a</arg_key>\n<arg_key>b</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
            "every <arg_key> needs exactly one <arg_value>",
        ),
        (
            "harmony",
            "<|channel|>commentary to=functions. <|constrain|>json<|message|>{}<|call|>",
            "empty recipient",
        ),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f g:0"
            "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            "expected functions.NAME:N",
        ),
        (
            "minimax_m2",
            '<minimax:tool_call>\n<invoke name="">\n</invoke>\n</minimax:tool_call>',
            "<invoke> has no name",
        ),
        ("mistral", "[TOOL_CALLS]functions.[ARGS]{}", "bad function name ''"),
        (
            "mistral_v11",
            "[TOOL_CALLS]a[TOOL_CALLS]b[ARGS]{}",
            "bad function name 'a[TOOL_CALLS]b'",
        ),
        (
            "qwen3_coder",
            "<tool_call>\n<function=>\n</function>\n</tool_call>",
            "<function=...> has no name",
        ),
        ("hermes", "<tool_call>\n[1, 2]\n</tool_call>", "must be a JSON object, got int"),
        (
            "hermes",
            '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>',
            "non-empty string 'name'",
        ),
        (
            "hermes",
            '<tool_call>\n{"name": "f", "arguments": "[1]"}\n</tool_call>',
            "arguments must be a JSON object, got list",
        ),
        ("jamba", "<tool_calls>[]</tool_calls>", "empty list of tool calls"),
        ("pythonic", "[f(a=b'x')]", "unsupported literal b'x'"),
        ("pythonic", "[f(**{'a': 1})]", "'**' is not allowed"),
        ("pythonic", "[f(a={**x})]", "'**' is not allowed"),
        ("pythonic", "[f(*args)]", "'*' is not allowed"),
        ("pythonic", "[f(a=-'x')]", "a sign applies to numbers only"),
        ("pythonic", "[f(), 1]", "expected a function call"),
        ("pythonic", "[f()(1)]", "a call must name a function"),
        ("pythonic", "[f(a='x' 1)]", "not a Python expression (SyntaxError)"),
    ],
)
def test_each_malformed_call_says_what_is_wrong_and_keeps_the_text(fmt, markup, problem):
    out = toolcalls.parse("Hi. " + markup, fmt)
    assert out.tool_calls == ()
    (error,) = out.errors
    assert error.startswith(f"{fmt}: malformed tool call: ") and problem in error
    assert "the text was kept as content" in error
    assert out.content.startswith("Hi. ") and len(out.content) > len("Hi. ")


@pytest.mark.parametrize(
    ("fmt", "text", "content"),
    [
        ("mistral", "Hello [TOOL_CALLS] and more", "Hello  and more"),
        ("mistral_v11", "x [TOOL_CALLS]foo[ARGS]nope", "x foo[ARGS]nope"),
        ("llama3_json", "<|python_tag|>no call here", "no call here"),
    ],
)
def test_a_format_token_without_a_payload_is_dropped_and_the_error_says_so(fmt, text, content):
    out = toolcalls.parse(text, fmt)
    assert out.tool_calls == () and out.content == content
    (error,) = out.errors
    assert "is not followed by a payload" in error
    assert error.endswith("the marker was dropped, the text after it kept as content")


def test_well_formed_variants_of_call_markup_are_read():
    wrapped = (
        '<tool_call>\n{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}, "id": "c9"}\n'
        "</tool_call>"
    )
    assert toolcalls.parse(wrapped, "hermes").tool_calls == (ToolCall("f", {"a": 1}, "c9"),)
    blank = '<tool_call>\n{"name": "f", "arguments": "  "}\n</tool_call>'
    assert toolcalls.parse(blank, "hermes").tool_calls == (ToolCall("f", {}),)
    quoted = '<start_function_call>call:f{a:"Paris \\u00e9"}<end_function_call>'  # JSON-quoted
    assert toolcalls.parse(quoted, "functiongemma").tool_calls == (ToolCall("f", {"a": "Paris é"}),)
    spaced = "<start_function_call>call:f{ a : 3 , b:  4 }<end_function_call>"
    assert toolcalls.parse(spaced, "functiongemma").tool_calls == (ToolCall("f", {"a": 3, "b": 4}),)
    words = "[f(x=False, y=True, z=None)]"
    assert toolcalls.parse(words, "pythonic").tool_calls == (
        ToolCall("f", {"x": False, "y": True, "z": None}),
    )
    assert toolcalls.render_calls([ToolCall("f", {"x": False})], "pythonic") == "[f(x=False)]"
    # Mistral v11: a space before [ARGS], even split across stream deltas, is still the call.
    parser = toolcalls.StreamParser("mistral")
    for delta in ["Hi. [TOOL_CALLS]f", " ", '[ARGS]{"a":', " 1}"]:
        parser.feed(delta)
    assert parser.finish().tool_calls == (ToolCall("f", {"a": 1}),)


def test_parsed_output_takes_one_error_string_as_one_error():
    one = toolcalls.ParsedOutput(errors="hermes: bad", tool_calls=None)
    assert one.errors == ("hermes: bad",) and one.tool_calls == ()
    assert toolcalls.ParsedOutput(errors=["a", "b"]).errors == ("a", "b")


@pytest.mark.parametrize("end", ["close", "finish"])
def test_text_fed_after_the_output_ended_is_refused_not_dropped(end):
    parser = toolcalls.StreamParser("hermes", in_reasoning=False)
    assert parser.feed("hello") == [toolcalls.ContentDelta("hello")]
    getattr(parser, end)()
    with pytest.raises(ToolFormatError, match=r"output has ended .*start a new StreamParser"):
        parser.feed(" more")
    assert parser.feed("") == []  # nothing to lose
    assert parser.finish().content == "hello"  # the result is unchanged
