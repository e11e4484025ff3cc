# SPDX-License-Identifier: Apache-2.0
"""``deepseek_v31``: DeepSeek V3.1 calls without the type and the ```` ```json ```` fence.

``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``

Same tokens as deepseek_v3; the template concatenates the arguments, so they
go back as JSON text. ``<think>`` reasoning, opened in the prompt in thinking mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from mp13_engine.toolcalls import _deepseek_v3 as v3
from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle
from mp13_engine.toolcalls._values import PayloadError, bare_name, dumps
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    name, sep, args = payload.partition(v3.SEP)
    name = bare_name(name)
    if not sep or not name:
        raise PayloadError("expected NAME<｜tool▁sep｜>{arguments}")
    return [ToolCall(name=name, arguments=v3.json_args(args))]


def _render(calls: Sequence[ToolCall]) -> str:
    body = "".join(
        f"{v3.CALL_BEGIN}{c.name}{v3.SEP}{dumps(c.arguments)}{v3.CALL_END}" for c in calls
    )
    return f"{v3.CALLS_BEGIN}{body}{v3.CALLS_END}"


# deepseek_v3's markers, reasoning and wrappers; the call layout and template differ.
PROFILE = attrs.evolve(
    v3.PROFILE,
    name="deepseek_v31",
    decode=_decode,
    render=_render,
    detect=(r"\['name'\]\s*\+\s*'<｜tool▁sep｜>'",),
    # DeepSeek's own templates render tool calls only when the content is None.
    messages=MessageStyle(arguments="string", content_none=None),
)
