# SPDX-License-Identifier: Apache-2.0
"""``kimi_k2``: Kimi K2 section/call tokens with ``functions.NAME:N`` ids.

::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(one line in real output: no separators between the tokens, though whitespace
around the id is tolerated). The
id (``functions.get_weather:0``, the index counting calls across the whole
conversation) is kept as the call id; the name is bare. The template writes
each past call's id back verbatim and a result as ``## Return of <id>``, so the
ids must survive the round trip. Kimi-K2's first published template declared
tools (``tool_declare``) but rendered no calls; it is detected too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import THINK, DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    bare_name,
    dumps,
    json_arguments,
)
from mp13_toolbox import ToolCall

_ARG = "<|tool_call_argument_begin|>"
_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
_KIMI_ID = re.compile(r"^functions\.[^\s:]+:\d+$")


def kimi_id(call: ToolCall, index: int) -> str:
    """Kimi K2 ids are ``functions.NAME:N``; any other id is rewritten to that form."""
    if call.id and _KIMI_ID.match(call.id):
        return call.id
    return f"functions.{call.name}:{index}"


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    head, sep, args = payload.partition(_ARG)
    head = head.strip()
    name = bare_name(head)
    if not sep or not name or any(ch.isspace() for ch in name):
        raise PayloadError("expected functions.NAME:N<|tool_call_argument_begin|>{arguments}")
    return [ToolCall(name=name, arguments=json_arguments(args.strip()), id=head)]


def _render(calls: Sequence[ToolCall]) -> str:
    body = "".join(
        "<|tool_call_begin|>" + kimi_id(c, i) + f"{_ARG}{dumps(c.arguments)}<|tool_call_end|>"
        for i, c in enumerate(calls)
    )
    return f"{_SECTION[0]}{body}{_SECTION[1]}"


PROFILE = Profile(
    name="kimi_k2",
    openers=(Opener("<|tool_call_begin|>", ends=("<|tool_call_end|>",), quoted='"'),),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    wrappers=_SECTION,
    detect=(
        r"<\|tool_call_begin\|>",
        r"<\|tool_calls_section_begin\|>",
        r"<\|im_system\|>tool_declare<\|im_middle\|>",
    ),
    messages=MessageStyle(arguments="object", ids="kimi"),
)
