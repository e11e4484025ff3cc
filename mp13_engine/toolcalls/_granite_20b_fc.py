# SPDX-License-Identifier: Apache-2.0
"""``granite_20b_fc``: IBM granite-20b-functioncalling, ``<function_call> {...}`` per call.

::

    <function_call> {"name": "get_weather", "arguments": {"city": "Paris"}}<|endoftext|>

Each call is the ``<function_call>`` tag and one JSON object; several calls
follow each other. There is no closing tag: the object ends where its braces
balance. Its template lists the tools after ``<|function_call_library|>``,
writes past calls in that same syntax and results after
``<function_response>``. It tells the model to answer
``{"name": "no_function", ...}`` when no tool fits: that is the model saying
"no call", so it yields none (the markup is dropped, not kept as text).
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import DecodeContext, Opener, Profile, Switch
from mp13_engine.toolcalls._values import calls_from_json, json_each
from mp13_toolbox import ToolCall

NO_FUNCTION = "no_function"


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall] | Switch:
    calls = [c for c in calls_from_json(payload.strip()) if c.name != NO_FUNCTION]
    return calls or Switch("text")


PROFILE = Profile(
    name="granite_20b_fc",
    openers=(Opener("<function_call>"),),
    decode=_decode,
    render=json_each("<function_call> ", sep=""),
    wrappers=("<function_call>",),
    detect=(r"<\|function_call_library\|>", r"<function_call>"),
)
