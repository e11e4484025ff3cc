# SPDX-License-Identifier: Apache-2.0
"""``kimi_k2``: Kimi K2 section/call tokens with ``functions.NAME:N`` ids.

::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The id (``functions.get_weather:0``) is kept as the call id; the name is bare.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import THINK, DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    arguments_object,
    bare_name,
    dumps,
    loads,
)
from mp13_toolbox import ToolCall

_ARG = "<|tool_call_argument_begin|>"
_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
_KIMI_ID = re.compile(r"^functions\.[^\s:]+:\d+$")


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    head, sep, args = payload.partition(_ARG)
    head = head.strip()
    name = bare_name(head)
    if not sep or not name or any(ch.isspace() for ch in name):
        raise PayloadError("expected functions.NAME:N<|tool_call_argument_begin|>{arguments}")
    value = loads(args.strip()) if args.strip() else None
    return [ToolCall(name=name, arguments=arguments_object(value), id=head)]


def _render(calls: Sequence[ToolCall]) -> str:
    body = "".join(
        "<|tool_call_begin|>"
        + (c.id if c.id and _KIMI_ID.match(c.id) else f"functions.{c.name}:{i}")
        + f"{_ARG}{dumps(c.arguments)}<|tool_call_end|>"
        for i, c in enumerate(calls)
    )
    return f"{_SECTION[0]}{body}{_SECTION[1]}"


PROFILE = Profile(
    name="kimi_k2",
    openers=(Opener("<|tool_call_begin|>", ends=("<|tool_call_end|>",)),),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    wrappers=_SECTION,
    detect=(r"<\|tool_call_begin\|>", r"<\|tool_calls_section_begin\|>"),
    messages=MessageStyle(arguments="object", ids="kimi"),
)
