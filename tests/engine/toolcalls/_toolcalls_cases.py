# SPDX-License-Identifier: Apache-2.0
"""Shared samples for the tool-call conformance suite.

``REAL`` holds hand-written outputs in each format's real wire syntax (as the
models print them, incl. their stop tokens); the conformance tests build the
rest from each profile's renderer so that every format gets the same cases.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from mp13_engine import toolcalls
from mp13_toolbox import ToolCall


def _example_format() -> toolcalls.Profile:
    """The format ``examples/custom_tool_format.py`` registers (its module, not run)."""
    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / "custom_tool_format.py"
    spec = importlib.util.spec_from_file_location("custom_tool_format_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.COMMAND_R


#: A format added the way users add one (registered around every test here, see conftest).
USER_FORMAT = _example_format()
BUILTIN_FORMATS = toolcalls.formats()
FORMATS = sorted([*BUILTIN_FORMATS, USER_FORMAT.name])


def profile_of(fmt: str) -> toolcalls.Profile:
    """A format's profile, also at collection time (before the user format is registered)."""
    return USER_FORMAT if fmt == USER_FORMAT.name else toolcalls.get_profile(fmt)


#: Formats whose parameter values are raw text (converted with the schema when known).
RAW_TEXT = {"qwen3_coder", "glm45", "minimax_m2", "seed_oss", "functiongemma"}

WEATHER = ToolCall("get_weather", {"city": "Paris", "days": 3})
NESTED = ToolCall(
    "search",
    {
        "query": 'naïve café 東京 🚀 "quoted" back\\slash',
        "filters": {"tags": ["a", "b"], "limits": {"max": 10, "ratio": 2.5}, "on": True},
        "nothing": None,
    },
)
EMPTY = ToolCall("ping", {})

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name."},
                    "days": {"type": "integer", "description": "How many days."},
                    "zip": {"type": "string", "description": "Postal code."},
                    "metric": {"type": "boolean", "description": "Metric units."},
                    "extra": {"type": "object", "description": "Extra options."},
                },
                "required": ["city"],
            },
        },
    }
]

# Real-looking outputs per format: (text, expected calls as (name, args, id or None), content).
REAL: dict[str, list[tuple[str, list[tuple[str, dict, str | None]], str]]] = {
    "hermes": [
        (
            'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            "</tool_call><|im_end|>",
            [("get_weather", {"city": "Paris"}, None)],
            "I will check.",
        ),
        (
            "<think>\nUser wants weather.\n</think>\n\n<tool_call>\n"
            '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>',
            [("get_weather", {"city": "Paris"}, None), ("get_weather", {"city": "Rome"}, None)],
            "",
        ),
        (
            # A code snippet that mentions the closing tag (the call is still read whole).
            '<tool_call>\n{"name": "write_file", "arguments": {"path": "p.py", "text": '
            "\"if '</tool_call>' in s:\\n    stop()\"}}\n</tool_call><|im_end|>",
            [("write_file", {"path": "p.py", "text": "if '</tool_call>' in s:\n    stop()"}, None)],
            "",
        ),
    ],
    "qwen3_coder": [
        (
            "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
            "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>",
            [("get_weather", {"city": "Paris", "days": 3}, None)],
            "Let me look.",
        ),
        (
            "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
    ],
    "llama3_json": [
        (
            '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}'
            "<|eot_id|>",
            [("a", {}, None), ("b", {"x": 1}, None)],
            "",
        ),
    ],
    "pythonic": [
        (
            '[get_weather(city="Paris", metric=true), ping()]<end_of_turn>',
            [("get_weather", {"city": "Paris", "metric": True}, None), ("ping", {}, None)],
            "",
        ),
    ],
    "llama4_pythonic": [
        (
            "<|python_start|>[get_weather(city='Paris', days=-2)]<|python_end|><|eom|>",
            [("get_weather", {"city": "Paris", "days": -2}, None)],
            "",
        ),
        ("[get_weather(city='Rome')]<|eot|>", [("get_weather", {"city": "Rome"}, None)], ""),
    ],
    "mistral": [
        (
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, '
            '"id": "a1B2c3D4e"}]</s>',
            [("get_weather", {"city": "Paris"}, "a1B2c3D4e")],
            "",
        ),
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (  # stop markers quoted in a string are text, however many
            '[TOOL_CALLS]get_weather[ARGS]{"city": "<|im_end|> or <|eot_id|>"}</s>',
            [("get_weather", {"city": "<|im_end|> or <|eot_id|>"}, None)],
            "",
        ),
        (
            "[THINK]Need weather.[/THINK]Checking.[TOOL_CALLS]"
            '[{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}]</s>',
            [("get_weather", {"city": "Oslo"}, None)],
            "Checking.",
        ),
    ],
    "mistral_v11": [
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]ping[ARGS]{}</s>',
            [("get_weather", {"city": "Paris"}, None), ("ping", {}, None)],
            "",
        ),
        (
            '[TOOL_CALLS]get_weather[CALL_ID]x9Y8z7W6v[ARGS]{"city": "Paris"}</s>',
            [("get_weather", {"city": "Paris"}, "x9Y8z7W6v")],
            "",
        ),
        (
            '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]</s>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            # v11 without [ARGS], as vLLM reads it.
            'Sure.[TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]ping{}</s>',
            [("get_weather", {"city": "Paris"}, None), ("ping", {}, None)],
            "Sure.",
        ),
    ],
    "granite": [
        (
            '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end_of_text|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            # Granite 3.1+ often opens with the plain string (vLLM accepts it).
            '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end_of_text|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            'Ok.<tool_call>[{"name": "ping", "arguments": {}}]</tool_call><|end_of_text|>',
            [("ping", {}, None)],
            "Ok.",
        ),
    ],
    "granite_20b_fc": [
        (
            '<function_call> {"name": "get_weather", "arguments": {"city": "Paris"}}<|endoftext|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            '<function_call> {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}} '
            '<function_call> {"name": "ping", "arguments": {}}<|endoftext|>',
            [("get_weather", {"city": "Oslo", "days": 2}, None), ("ping", {}, None)],
            "",
        ),
        (
            # The template's "no tool fits" answer is no call.
            '<function_call> {"name": "no_function", "arguments": {}}<|endoftext|>',
            [],
            "",
        ),
    ],
    "functiongemma": [
        (
            "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}"
            "<end_function_call><start_function_response>",
            [("get_weather", {"city": "Paris", "days": 3}, None)],
            "",
        ),
        (
            "Sure.<start_function_call>call:get_weather{city:<escape>Tokyo, Japan<escape>}"
            "<end_function_call><start_function_call>call:ping{}<end_function_call>",
            [("get_weather", {"city": "Tokyo, Japan"}, None), ("ping", {}, None)],
            "Sure.",
        ),
        (
            # The closing tag cut off: a complete call is still read.
            "<start_function_call>call:get_weather{city:<escape>Paris<escape>,metric:true}"
            "<end_of_turn>",
            [("get_weather", {"city": "Paris", "metric": True}, None)],
            "",
        ),
        (
            "<start_function_call>call:write{text:<escape>a}<end_function_call>, {b}<escape>}"
            "<end_function_call>",
            [("write", {"text": "a}<end_function_call>, {b}"}, None)],
            "",
        ),
    ],
    "phi4_mini": [
        (
            'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            # Phi-4-mini's own template: <|tool_call|>...<|/tool_call|>.
            '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>'
            "<|end|>",
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            '<|tool_call|>{"name": "get_weather", "arguments": {"city": "Rome"}}, '
            '{"name": "ping", "arguments": {}}<|/tool_call|>',
            [("get_weather", {"city": "Rome"}, None), ("ping", {}, None)],
            "",
        ),
    ],
    "deepseek_v3": [
        (
            "<think>\nweather\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            '<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>'
            "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (  # a code fence without the "json" tag is read the same
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```\n{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            [("get_weather", {"city": "Rome"}, None)],
            "",
        ),
    ],
    "deepseek_v31": [
        (
            "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
            '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
            [("get_weather", {"city": "Paris"}, None)],
            "Sure.",
        ),
    ],
    "glm45": [
        (
            "\n<think>Weather needed.</think>\nChecking.\n<tool_call>get_weather\n"
            "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call><|observation|>",
            [("get_weather", {"city": "Paris", "days": 3}, None)],
            "Checking.",
        ),
    ],
    "kimi_k2": [
        (
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
            '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
            "<|tool_calls_section_end|><|im_end|>",
            [("get_weather", {"city": "Paris"}, "functions.get_weather:0")],
            "",
        ),
    ],
    "harmony": [
        (
            "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
            '{"city": "Paris"}<|call|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
            "<|message|>It is sunny.<|return|>",
            [],
            "It is sunny.",
        ),
    ],
    "gemma_tool_code": [
        (
            'Checking.\n```tool_code\nprint(get_weather(city="Paris"))\n```<end_of_turn>',
            [("get_weather", {"city": "Paris"}, None)],
            "Checking.",
        ),
        (  # lines without print(...), one call each
            '```tool_code\nget_weather(city="Rome")\nprint(ping())\n```',
            [("get_weather", {"city": "Rome"}, None), ("ping", {}, None)],
            "",
        ),
    ],
    "internlm": [
        (
            'Sure.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": '
            '{"city": "Paris"}}<|action_end|><|im_end|>',
            [("get_weather", {"city": "Paris"}, None)],
            "Sure.",
        ),
    ],
    "jamba": [
        (
            '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
    ],
    "xlam": [
        (
            '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
        (
            '```json\n[{"name": "get_weather", "arguments": {"city": "Rome"}}]\n```',
            [("get_weather", {"city": "Rome"}, None)],
            "",
        ),
    ],
    "minimax": [
        (
            "<think>w</think>\n<tool_calls>\n"
            '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '{"name": "ping", "arguments": {}}\n</tool_calls>',
            [("get_weather", {"city": "Paris"}, None), ("ping", {}, None)],
            "",
        ),
    ],
    "minimax_m2": [
        (
            '<think>w</think>\nOk.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
            '<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n'
            "</invoke>\n</minimax:tool_call>[e~[",
            [("get_weather", {"city": "Paris", "days": 3}, None)],
            "Ok.",
        ),
    ],
    USER_FORMAT.name: [
        (
            "Plan: search first.\nAction: ```json\n"
            '[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]\n```'
            "<|END_OF_TURN_TOKEN|>",
            [("get_weather", {"city": "Paris"}, None)],
            "Plan: search first.",
        ),
    ],
    "seed_oss": [
        (
            "<seed:think>weather</seed:think>Ok.<seed:tool_call>\n<function=get_weather>\n"
            "<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call><seed:eos>",
            [("get_weather", {"city": "Paris"}, None)],
            "Ok.",
        ),
    ],
}


def render(calls: list[ToolCall], fmt: str) -> str:
    return toolcalls.render_calls(calls, fmt)


def samples(fmt: str) -> list[str]:
    """Texts covering every conformance case of a format (for the split/fuzz tests)."""
    good = render([WEATHER], fmt)
    out = [text for text, _, _ in REAL[fmt]]
    out += [
        "Just an answer, no tools.",
        good,
        render([WEATHER, NESTED, EMPTY], fmt),
        "Before.\n" + good + "\nAfter.",
        good.replace('"Paris"', "Paris").replace("'Paris'", "Paris"),
        good[: len(good) // 2],
        good[: len(good) - 1],
    ]
    profile = profile_of(fmt)
    for open_tag, close_tag in profile.reasoning:
        out.append(f"{open_tag}draft {good}{close_tag}Answer: " + good)
        out.append(f"thinking {good} more{close_tag}\n\nAnswer")
    return out


def calls_tuple(calls) -> list[tuple]:
    return [(c.name, c.arguments, c.id) for c in calls]


_ALL_TOOLS = object()  # "render with TOOLS" (None means: no tools= argument)


def render_template(
    template: str, messages: list[dict], add_generation_prompt: bool, tools=_ALL_TOOLS
) -> str:
    """Render ``messages`` (with ``TOOLS``) through a chat template, as transformers does."""
    chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    rendered, _ = chat_utils.render_jinja_template(
        conversations=[messages],
        tools=TOOLS if tools is _ALL_TOOLS else tools,
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        bos_token="<s>",
        eos_token="</s>",
    )
    return rendered[0]


def assistant_part(template: str, messages: list[dict], tools=_ALL_TOOLS) -> str:
    """What the template writes for the last (assistant) message."""
    prefix = render_template(template, messages[:-1], True, tools)
    full = render_template(template, messages, False, tools)
    n = 0
    while n < min(len(prefix), len(full)) and prefix[n] == full[n]:
        n += 1
    return full[n:]


def support_of(template: str) -> toolcalls.TemplateSupport:
    """``template_support`` of a template rendered by transformers' renderer."""

    class _Tokenizer:
        def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, **_):
            return render_template(template, messages, add_generation_prompt, tools)

    return toolcalls.template_support(_Tokenizer())


def prepare_for(template: str, fmt: str | None, messages: list[dict], tools=TOOLS):
    """``prepare_chat`` as the engine runs it: probed support, the default format if none."""
    return toolcalls.prepare_chat(
        messages,
        tools,
        fmt or toolcalls.DEFAULT_FORMAT,
        chat_template=template,
        support=support_of(template),
    )
