# SPDX-License-Identifier: Apache-2.0
"""``jamba``: AI21 Jamba 1.5+, ``<tool_calls>[{"name": ..., "arguments": {...}}]</tool_calls>``."""

from __future__ import annotations

from mp13_engine.toolcalls._profile import Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls, json_list

PROFILE = Profile(
    name="jamba",
    openers=(Opener("<tool_calls>", ends=("</tool_calls>",), quoted='"'),),
    decode=decode_json_calls,
    render=json_list("<tool_calls>", "</tool_calls>"),
    detect=(r"<tool_calls>",),
)
