# SPDX-License-Identifier: Apache-2.0
"""``phi4_mini``: Phi-4-mini (vLLM's tool template), ``functools[{...}, ...]``.

No closing marker: the JSON list ends where its brackets balance. The
template does not render ``tool_calls`` (calls go back in the content) and
wraps results of role ``tools`` as ``{"result": ...}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._profile import MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import calls_json, decode_json_calls
from mp13_toolbox import ToolCall


def _render(calls: Sequence[ToolCall]) -> str:
    return "functools" + calls_json(calls)


PROFILE = Profile(
    name="phi4_mini",
    openers=(Opener("functools"),),
    decode=decode_json_calls,
    render=_render,
    detect=(r"functools",),
    messages=MessageStyle(calls_in_content=True, tool_role="tools"),
)
