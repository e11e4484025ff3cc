# SPDX-License-Identifier: Apache-2.0
"""``llama4_pythonic``: Llama 4, pythonic call lists or JSON call objects.

Llama 4's templates disagree on the call syntax. vLLM's Llama 4 template asks
for a pythonic list, ``[get_weather(city="Paris"), ping()]`` (same syntax and
decoding as ``pythonic``); Meta's own template asks for JSON,
``{"name": "get_weather", "parameters": {"city": "Paris"}}`` (one object per
call, ``;`` between calls accepted as in Llama 3), and renders past calls
after a ``<|python_start|>...<|python_end|>`` pair. Both are accepted, so the
format fits either template. vLLM's template writes every past argument as
``name="value"`` (a number becomes a string, a dict Python text): with it,
past calls go back in the content, written by the format's own renderer.
``<|python_start|>`` / ``<|python_end|>`` are dropped wherever they appear:
a call inside them is decoded like a bare one, and text inside them is content.
``<|eot|>`` / ``<|eom|>`` end the turn. Calls are rendered as the pythonic list.
"""

from __future__ import annotations

from mp13_engine.toolcalls._llama3_json import JSON_OPENER, decode_json_call
from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    DecodeContext,
    MessageStyle,
    Profile,
)
from mp13_engine.toolcalls._pythonic import LIST_OPENER, render_python_list
from mp13_engine.toolcalls._values import decode_python_list
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    if ctx.opener is JSON_OPENER:
        return decode_json_call(payload, ctx)
    return decode_python_list(payload, ctx)


PROFILE = Profile(
    name="llama4_pythonic",
    openers=(LIST_OPENER, JSON_OPENER),
    decode=_decode,
    render=render_python_list,
    stops=(*COMMON_STOPS, "<|eot|>", "<|eom|>"),
    wrappers=("<|python_start|>", "<|python_end|>"),
    detect=(r"<\|python_start\|>", r"<\|header_start\|>"),
    variants=((r"""\+\s*'="'""", MessageStyle(arguments="object", calls_in_content=True)),),
)
