# SPDX-License-Identifier: Apache-2.0
"""``mistral_v11``: Mistral tokenizers v11+, ``[TOOL_CALLS]name[ARGS]{...}`` per call.

Tokenizer v11 puts ``[CALL_ID]id`` between the name and ``[ARGS]`` when the
call has an id; v13 dropped it again (both are accepted). The arguments are
one JSON value (``json.dumps`` spacing) ending where its brackets balance. The pre-v11 list
(``[TOOL_CALLS][{...}]``), which some v11-era models still write, is accepted
too. ``[THINK]...[/THINK]`` is reasoning; ids are made 9 alphanumerics on the
way back.
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._mistral import THINK_TAGS
from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    arguments_object,
    bare_name,
    decode_json_calls,
    dumps,
    loads,
)
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    if payload.lstrip()[:1] in ("[", "{"):  # the pre-v11 list, still written by some models
        return decode_json_calls(payload, ctx)
    head, _, args = payload.partition("[ARGS]")
    name, _, call_id = head.partition("[CALL_ID]")
    name = bare_name(name)
    if not name or any(ch.isspace() for ch in name):
        raise PayloadError(f"bad function name {name!r} before [ARGS]")
    value = loads(args.strip())
    return [ToolCall(name=name, arguments=arguments_object(value), id=call_id.strip() or None)]


def _render(calls: Sequence[ToolCall]) -> str:
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{dumps(c.arguments)}" for c in calls)


PROFILE = Profile(
    name="mistral_v11",
    openers=(Opener("[TOOL_CALLS]", after="[ARGS]"),),
    decode=_decode,
    render=_render,
    reasoning=THINK_TAGS,
    wrappers=("[TOOL_CALLS]",),
    detect=(r"\[ARGS\]", r"\[CALL_ID\]"),
    messages=MessageStyle(arguments="object", ids="mistral9"),
)
