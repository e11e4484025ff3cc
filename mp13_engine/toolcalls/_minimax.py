# SPDX-License-Identifier: Apache-2.0
"""``minimax``: MiniMax-M1, ``<tool_calls>`` then one JSON call object per line, ``</tool_calls>``.

``<think>`` reasoning; ``[e~[`` ends a MiniMax message.
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    THINK,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import call_from_obj, json_each, loads
from mp13_toolbox import ToolCall

STOPS = (*COMMON_STOPS, "[e~[")
_LINES = json_each()


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    return [call_from_obj(loads(line)) for line in payload.splitlines() if line.strip()]


def _render(calls: Sequence[ToolCall]) -> str:
    return f"<tool_calls>\n{_LINES(calls)}\n</tool_calls>"


PROFILE = Profile(
    name="minimax",
    openers=(Opener("<tool_calls>", ends=("</tool_calls>",), quoted='"'),),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    stops=STOPS,
    detect=(r"\]~b\]", r"\]~!b\["),
    messages=MessageStyle(arguments="string"),
)
