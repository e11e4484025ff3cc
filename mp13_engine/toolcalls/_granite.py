# SPDX-License-Identifier: Apache-2.0
"""``granite``: IBM Granite 3.x, ``<|tool_call|>[{"name": ..., "arguments": {...}}]``.

The JSON list follows the marker with no closing tag: the payload ends where
its brackets balance. Granite 3.1+ models often open the list with the plain
string ``<tool_call>`` instead of the special token (vLLM accepts both); a
``</tool_call>`` some add after it is dropped. ``<think>`` reasoning and
``<response>`` wrappers (Granite 3.2+ thinking mode). Granite's template does
not render ``tool_calls``, so calls go back to the model in the assistant
content.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import THINK, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls, json_list

PROFILE = Profile(
    name="granite",
    openers=(Opener("<|tool_call|>"), Opener("<tool_call>")),
    decode=decode_json_calls,
    render=json_list("<|tool_call|>"),
    reasoning=THINK,
    wrappers=("<|tool_call|>", "</tool_call>", "<response>", "</response>"),
    detect=(r"<\|tool_call\|>",),
    messages=MessageStyle(calls_in_content=True),
)
