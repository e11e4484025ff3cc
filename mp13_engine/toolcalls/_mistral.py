# SPDX-License-Identifier: Apache-2.0
"""``mistral`` and ``mistral_v11``: Mistral's ``[TOOL_CALLS]`` token.

mistral (tokenizer < v11): ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abc123XYZ"}]``.
mistral_v11 (v11+): ``[TOOL_CALLS]name[ARGS]{...}`` per call, with an optional
``[CALL_ID]id`` before ``[ARGS]`` (v13). ``[THINK]...[/THINK]`` is reasoning
(Magistral). Call ids are kept; templates need 9 alphanumerics, which
``prepare_messages`` ensures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    arguments_object,
    bare_name,
    calls_from_json,
    dumps,
    loads,
)
from mp13_toolbox import ToolCall

_THINK = (("[THINK]", "[/THINK]"),)


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    return calls_from_json(payload.strip())


def _decode_v11(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    head, _, args = payload.partition("[ARGS]")
    name, _, call_id = head.partition("[CALL_ID]")
    name = bare_name(name)
    if not name or any(ch.isspace() for ch in name):
        raise PayloadError(f"bad function name {name!r} before [ARGS]")
    value = loads(args.strip())
    return [ToolCall(name=name, arguments=arguments_object(value), id=call_id.strip() or None)]


def _render(calls: Sequence[ToolCall]) -> str:
    items = []
    for c in calls:
        item = {"name": c.name, "arguments": c.arguments}
        if c.id is not None:
            item["id"] = c.id
        items.append(item)
    return "[TOOL_CALLS]" + json.dumps(items, ensure_ascii=False)


def _render_v11(calls: Sequence[ToolCall]) -> str:
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{dumps(c.arguments)}" for c in calls)


PROFILES = MappingProxyType(
    {
        "mistral": Profile(
            name="mistral",
            openers=(Opener("[TOOL_CALLS]"),),
            decode=_decode,
            render=_render,
            reasoning=_THINK,
            detect=(r"\[TOOL_CALLS\]",),
            messages=MessageStyle(arguments="object", ids="mistral9"),
        ),
        "mistral_v11": Profile(
            name="mistral_v11",
            openers=(Opener("[TOOL_CALLS]", after="[ARGS]"),),
            decode=_decode_v11,
            render=_render_v11,
            reasoning=_THINK,
            detect=(r"\[ARGS\]", r"\[CALL_ID\]"),
            messages=MessageStyle(arguments="object", ids="mistral9"),
        ),
    }
)
