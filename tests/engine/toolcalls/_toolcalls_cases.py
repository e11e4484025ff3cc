# SPDX-License-Identifier: Apache-2.0
"""Shared samples for the tool-call conformance suite.

``REAL`` holds hand-written outputs in each format's real wire syntax (as the
models print them, incl. their stop tokens); the conformance tests build the
rest from each profile's renderer so that every format gets the same cases.
"""

from __future__ import annotations

import pytest

from mp13_engine import toolcalls
from mp13_toolbox import ToolCall

FORMATS = toolcalls.formats()

#: Formats whose parameter values are raw text (converted with the schema when known).
RAW_TEXT = {"qwen3_coder", "glm45", "minimax_m2", "seed_oss"}

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
    ],
    "granite": [
        (
            '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end_of_text|>',
            [("get_weather", {"city": "Paris"}, None)],
            "",
        ),
    ],
    "phi4_mini": [
        (
            'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end|>',
            [("get_weather", {"city": "Paris"}, None)],
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
    profile = toolcalls.get_profile(fmt)
    for open_tag, close_tag in profile.reasoning:
        out.append(f"{open_tag}draft {good}{close_tag}Answer: " + good)
        out.append(f"thinking {good} more{close_tag}\n\nAnswer")
    return out


def calls_tuple(calls) -> list[tuple]:
    return [(c.name, c.arguments, c.id) for c in calls]


def render_template(template: str, messages: list[dict], add_generation_prompt: bool) -> str:
    """Render ``messages`` (with ``TOOLS``) through a chat template, as transformers does."""
    chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    rendered, _ = chat_utils.render_jinja_template(
        conversations=[messages],
        tools=TOOLS,
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        bos_token="<s>",
        eos_token="</s>",
    )
    return rendered[0]


def assistant_part(template: str, messages: list[dict]) -> str:
    """What the template writes for the last (assistant) message."""
    prefix = render_template(template, messages[:-1], True)
    full = render_template(template, messages, False)
    n = 0
    while n < min(len(prefix), len(full)) and prefix[n] == full[n]:
        n += 1
    return full[n:]
