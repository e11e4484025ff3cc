# SPDX-License-Identifier: Apache-2.0
"""``mistral``: Mistral tokenizers before v11, ``[TOOL_CALLS][{...}, ...]``.

``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abc123XYZ"}]``: a JSON
list after the marker, ending where its brackets balance. Call ids are kept;
the templates demand 9 alphanumerics, which ``prepare_messages`` ensures.
``[THINK]...[/THINK]`` is reasoning (Magistral). Models of one generation do
not keep to one tokenizer version, so the v11 shapes (``name[ARGS]{...}``,
``name{...}``, see ``mistral_v11``) are read here too, and the list there.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import (
    PayloadError,
    arguments_object,
    bare_name,
    decode_json_calls,
    json_list,
    loads,
)
from mp13_toolbox import ToolCall

#: ``[TOOL_CALLS]`` then a JSON list, or ``name[ARGS]{...}`` / ``name{...}`` (one call).
OPENER = Opener("[TOOL_CALLS]", after="[ARGS]")


def decode_calls(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    """Any shape a Mistral model writes after ``[TOOL_CALLS]`` (one marker's payload)."""
    if payload.lstrip()[:1] in ("[", "{"):  # the pre-v11 list (or one object)
        return decode_json_calls(payload, ctx)
    if "[ARGS]" in payload:
        head, _, args = payload.partition("[ARGS]")
    else:  # v11 without [ARGS] (vLLM reads it): the name runs up to the arguments' "{"
        cut = payload.find("{")
        head, args = payload[:cut], payload[cut:]
    name, _, call_id = head.partition("[CALL_ID]")
    name = bare_name(name)
    if not name or any(ch.isspace() or ch in "[]{}" for ch in name):  # e.g. a[TOOL_CALLS]b
        raise PayloadError(f"bad function name {name!r} before the arguments")
    value = loads(args.strip())
    return [ToolCall(name=name, arguments=arguments_object(value), id=call_id.strip() or None)]


PROFILE = Profile(
    name="mistral",
    openers=(OPENER,),
    decode=decode_calls,
    render=json_list("[TOOL_CALLS]", ids=True),
    reasoning=(("[THINK]", "[/THINK]"),),
    wrappers=("[TOOL_CALLS]",),
    detect=(r"\[TOOL_CALLS\]",),
    messages=MessageStyle(arguments="object", ids="mistral9"),
)
