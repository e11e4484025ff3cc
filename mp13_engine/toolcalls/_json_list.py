# SPDX-License-Identifier: Apache-2.0
"""JSON payloads behind a marker token: ``granite``, ``phi4_mini``, ``internlm``, ``jamba``.

- granite (IBM Granite 3.x): ``<|tool_call|>[{"name": ..., "arguments": {...}}]``;
  Granite's template does not render ``tool_calls``, so they go back in the content.
- phi4_mini (vLLM's Phi-4-mini tool template): ``functools[{...}, ...]``, no closing marker.
- internlm (InternLM2/2.5):
  ``<|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|>``.
- jamba (AI21 Jamba 1.5+): ``<tool_calls>[{...}]</tool_calls>``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine.toolcalls._profile import (
    THINK,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import calls_from_json, dumps
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    return calls_from_json(payload.strip())


def _items(calls: Sequence[ToolCall]) -> str:
    return json.dumps(
        [{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False
    )


def _render_granite(calls: Sequence[ToolCall]) -> str:
    return "<|tool_call|>" + _items(calls)


def _render_phi4(calls: Sequence[ToolCall]) -> str:
    return "functools" + _items(calls)


def _render_internlm(calls: Sequence[ToolCall]) -> str:
    return "\n".join(
        "<|action_start|><|plugin|>\n"
        + dumps({"name": c.name, "parameters": c.arguments})
        + "<|action_end|>"
        for c in calls
    )


def _render_jamba(calls: Sequence[ToolCall]) -> str:
    return "<tool_calls>" + _items(calls) + "</tool_calls>"


PROFILES = MappingProxyType(
    {
        "granite": Profile(
            name="granite",
            openers=(Opener("<|tool_call|>"),),
            decode=_decode,
            render=_render_granite,
            reasoning=THINK,
            wrappers=("<response>", "</response>"),
            detect=(r"<\|tool_call\|>",),
            messages=MessageStyle(calls_in_content=True),
        ),
        "phi4_mini": Profile(
            name="phi4_mini",
            openers=(Opener("functools"),),
            decode=_decode,
            render=_render_phi4,
            detect=(r"functools",),
            messages=MessageStyle(calls_in_content=True, tool_role="tools"),
        ),
        "internlm": Profile(
            name="internlm",
            openers=(Opener("<|action_start|><|plugin|>", ends=("<|action_end|>",)),),
            decode=_decode,
            render=_render_internlm,
            lenient_eof=True,
            detect=(r"<\|action_start\|>", r"<\|plugin\|>"),
            messages=MessageStyle(calls_in_content=True, tool_role="environment"),
        ),
        "jamba": Profile(
            name="jamba",
            openers=(Opener("<tool_calls>", ends=("</tool_calls>",)),),
            decode=_decode,
            render=_render_jamba,
            detect=(r"<tool_calls>",),
            messages=MessageStyle(arguments="object"),
        ),
    }
)
