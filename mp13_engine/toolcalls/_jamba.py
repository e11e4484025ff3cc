# SPDX-License-Identifier: Apache-2.0
"""``jamba``: AI21 Jamba 1.5+, ``<tool_calls>[{"name": ..., "arguments": {...}}]</tool_calls>``."""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._profile import MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import calls_json, decode_json_calls
from mp13_toolbox import ToolCall


def _render(calls: Sequence[ToolCall]) -> str:
    return "<tool_calls>" + calls_json(calls) + "</tool_calls>"


PROFILE = Profile(
    name="jamba",
    openers=(Opener("<tool_calls>", ends=("</tool_calls>",), quoted='"'),),
    decode=decode_json_calls,
    render=_render,
    detect=(r"<tool_calls>",),
    messages=MessageStyle(arguments="object"),
)
