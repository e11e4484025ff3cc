# SPDX-License-Identifier: Apache-2.0
"""``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5/3).

One JSON object per ``<tool_call>`` block (a JSON list is accepted too);
``<think>`` reasoning. As in the reference tooling, a complete JSON payload at
the end of the output is accepted without its closing tag.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import THINK, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls, json_each

PROFILE = Profile(
    name="hermes",
    openers=(Opener("<tool_call>", ends=("</tool_call>",), quoted='"'),),
    decode=decode_json_calls,
    render=json_each("<tool_call>\n", "\n</tool_call>"),
    reasoning=THINK,
    close_only_reasoning=True,
    lenient_eof=True,
    detect=(r"<tool_call>",),
    # Where a template drops tool turns, results go back as Hermes' <tool_response> blocks.
    messages=MessageStyle(
        arguments="object", user_result="<tool_response>\n{content}\n</tool_response>"
    ),
)
