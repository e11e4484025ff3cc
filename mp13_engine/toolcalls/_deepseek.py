# SPDX-License-Identifier: Apache-2.0
"""``deepseek_v3`` and ``deepseek_v31``: DeepSeek's full-width special tokens.

deepseek_v3 (V3 / R1)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

deepseek_v31 (V3.1): ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``.
Each ``tool▁call`` block is one span; the ``tool▁calls`` section tokens are
wrappers. ``<think>`` reasoning, which R1/V3.1 templates may open in the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine.toolcalls._profile import THINK, DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    arguments_object,
    bare_name,
    dumps,
    loads,
)
from mp13_toolbox import ToolCall

SEP = "<｜tool▁sep｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"


def _json_args(text: str) -> dict:
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        if text.startswith("json"):
            text = text[4:]
        if not text.rstrip().endswith("```"):
            raise PayloadError("unterminated ```json block")
        text = text.rstrip()[:-3]
    return arguments_object(loads(text) if text.strip() else None)


def _decode_v3(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    _kind, sep, rest = payload.partition(SEP)
    if not sep:
        raise PayloadError("missing <｜tool▁sep｜>")
    name, _, args = rest.partition("\n")
    name = bare_name(name)
    if not name:
        raise PayloadError("missing function name")
    return [ToolCall(name=name, arguments=_json_args(args))]


def _decode_v31(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    name, sep, args = payload.partition(SEP)
    name = bare_name(name)
    if not sep or not name:
        raise PayloadError("expected NAME<｜tool▁sep｜>{arguments}")
    return [ToolCall(name=name, arguments=_json_args(args))]


def _render_v3(calls: Sequence[ToolCall]) -> str:
    body = "\n".join(
        f"{CALL_BEGIN}function{SEP}{c.name}\n```json\n{dumps(c.arguments)}\n```{CALL_END}"
        for c in calls
    )
    return f"{CALLS_BEGIN}{body}{CALLS_END}"


def _render_v31(calls: Sequence[ToolCall]) -> str:
    body = "".join(f"{CALL_BEGIN}{c.name}{SEP}{dumps(c.arguments)}{CALL_END}" for c in calls)
    return f"{CALLS_BEGIN}{body}{CALLS_END}"


_OPENER = Opener(CALL_BEGIN, ends=(CALL_END,))

PROFILES = MappingProxyType(
    {
        "deepseek_v3": Profile(
            name="deepseek_v3",
            openers=(_OPENER,),
            decode=_decode_v3,
            render=_render_v3,
            reasoning=THINK,
            close_only_reasoning=True,
            wrappers=(CALLS_BEGIN, CALLS_END),
            detect=(r"<｜tool▁calls▁begin｜>", r"tool▁sep"),
            messages=MessageStyle(arguments="object"),
        ),
        "deepseek_v31": Profile(
            name="deepseek_v31",
            openers=(_OPENER,),
            decode=_decode_v31,
            render=_render_v31,
            reasoning=THINK,
            close_only_reasoning=True,
            wrappers=(CALLS_BEGIN, CALLS_END),
            detect=(r"\['name'\]\s*\+\s*'<｜tool▁sep｜>'",),
            messages=MessageStyle(arguments="string"),
        ),
    }
)
