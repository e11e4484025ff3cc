# SPDX-License-Identifier: Apache-2.0
"""``deepseek_v31``: DeepSeek V3.1 calls without the type and the ```` ```json ```` fence.

``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``

Same tokens as deepseek_v3; the template concatenates the arguments, so they
go back as JSON text. ``<think>`` reasoning, opened in the prompt in thinking mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._deepseek_v3 import (
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    OPENER,
    SEP,
    json_args,
)
from mp13_engine.toolcalls._profile import THINK, DecodeContext, MessageStyle, Profile
from mp13_engine.toolcalls._values import PayloadError, bare_name, dumps
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    name, sep, args = payload.partition(SEP)
    name = bare_name(name)
    if not sep or not name:
        raise PayloadError("expected NAME<｜tool▁sep｜>{arguments}")
    return [ToolCall(name=name, arguments=json_args(args))]


def _render(calls: Sequence[ToolCall]) -> str:
    body = "".join(f"{CALL_BEGIN}{c.name}{SEP}{dumps(c.arguments)}{CALL_END}" for c in calls)
    return f"{CALLS_BEGIN}{body}{CALLS_END}"


PROFILE = Profile(
    name="deepseek_v31",
    openers=(OPENER,),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    wrappers=(CALLS_BEGIN, CALLS_END),
    detect=(r"\['name'\]\s*\+\s*'<｜tool▁sep｜>'",),
    # DeepSeek's own templates render tool calls only when the content is None.
    messages=MessageStyle(arguments="string", content_none=None),
)
