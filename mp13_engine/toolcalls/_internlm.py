# SPDX-License-Identifier: Apache-2.0
"""``internlm``: InternLM2 / 2.5 plugin calls.

``<|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|>``;
a complete JSON payload whose ``<|action_end|>`` was cut is accepted, as the
reference parser does. InternLM's plain ChatML template does not render
``tool_calls``, so calls go back in the content and results in an
``environment name=<|plugin|>`` turn (InternLM's documented header for plugin
results; the template writes the role verbatim after ``<|im_start|>``). A
tool-aware template that maps role ``tool`` to that turn itself (vLLM's, which
rejects any other role) gets results under role ``tool``.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls, json_each

PROFILE = Profile(
    name="internlm",
    openers=(Opener("<|action_start|><|plugin|>", ends=("<|action_end|>",), quoted='"'),),
    decode=decode_json_calls,
    render=json_each("<|action_start|><|plugin|>\n", "<|action_end|>", key="parameters"),
    lenient_eof=True,
    detect=(r"<\|action_start\|>", r"<\|plugin\|>"),
    messages=MessageStyle(
        calls_in_content=True,
        tool_role="environment name=<|plugin|>",
        native_tool_role=r"""\[?['"]?role['"]?\]?\s*==\s*['"]tool['"]""",
    ),
)
