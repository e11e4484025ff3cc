# SPDX-License-Identifier: Apache-2.0
"""``minimax`` (MiniMax-M1) and ``minimax_m2`` (MiniMax-M2).

minimax: ``<tool_calls>`` then one JSON object per line, ``</tool_calls>``.
minimax_m2::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

M2 parameter values are raw text converted with the tool's schema when known.
Both use ``<think>`` reasoning; ``[e~[`` ends a MiniMax message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    THINK,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import (
    PayloadError,
    bare_name,
    call_from_obj,
    convert_value,
    dumps,
    loads,
    param_schema,
)
from mp13_toolbox import ToolCall

_INVOKE = re.compile(r"<invoke\s+name=\"?([^\">]*)\"?\s*>(.*?)</invoke>", re.S)
_PARAM = re.compile(r"<parameter\s+name=\"?([^\">]*)\"?\s*>(.*?)</parameter>", re.S)
_STOPS = (*COMMON_STOPS, "[e~[")


def _decode_m1(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    return [call_from_obj(loads(line)) for line in payload.splitlines() if line.strip()]


def _decode_m2(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    calls = []
    for m in _INVOKE.finditer(payload):
        name = bare_name(m.group(1))
        if not name:
            raise PayloadError("<invoke> has no name")
        args: dict[str, Any] = {}
        for pm in _PARAM.finditer(m.group(2)):
            key = pm.group(1).strip()
            raw = pm.group(2)
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
            args[key] = convert_value(raw, param_schema(ctx.schemas, name, key))
        calls.append(ToolCall(name=name, arguments=args))
    if payload.count("<invoke") != len(calls):
        raise PayloadError("an <invoke> block is not closed")
    return calls


def _render_m1(calls: Sequence[ToolCall]) -> str:
    lines = "\n".join(dumps({"name": c.name, "arguments": c.arguments}) for c in calls)
    return f"<tool_calls>\n{lines}\n</tool_calls>"


def _render_m2(calls: Sequence[ToolCall]) -> str:
    body = "".join(
        f'<invoke name="{c.name}">\n'
        + "".join(
            f'<parameter name="{k}">{v if isinstance(v, str) else dumps(v)}</parameter>\n'
            for k, v in c.arguments.items()
        )
        + "</invoke>\n"
        for c in calls
    )
    return f"<minimax:tool_call>\n{body}</minimax:tool_call>"


PROFILES = MappingProxyType(
    {
        "minimax": Profile(
            name="minimax",
            openers=(Opener("<tool_calls>", ends=("</tool_calls>",)),),
            decode=_decode_m1,
            render=_render_m1,
            reasoning=THINK,
            close_only_reasoning=True,
            stops=_STOPS,
            detect=(r"\]~b\]", r"\]~!b\["),
            messages=MessageStyle(arguments="string"),
        ),
        "minimax_m2": Profile(
            name="minimax_m2",
            openers=(Opener("<minimax:tool_call>", ends=("</minimax:tool_call>",)),),
            decode=_decode_m2,
            render=_render_m2,
            reasoning=THINK,
            close_only_reasoning=True,
            stops=_STOPS,
            detect=(r"<minimax:tool_call>",),
            messages=MessageStyle(arguments="object"),
        ),
    }
)
