# SPDX-License-Identifier: Apache-2.0
"""``phi4_mini``: Phi-4-mini, ``<|tool_call|>[{...}]<|/tool_call|>`` or ``functools[{...}]``.

Phi-4-mini's own template takes the tool specs as JSON text in the system
message's ``tools`` field (``<|tool|>...<|/tool|>``) and the model answers
``<|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>``; as the
Berkeley leaderboard's handler notes, it often leaves out the closing tag
(accepted at the end of the output) and may write parallel calls as
comma-separated objects without the list (accepted). vLLM's tool template
asks for ``functools[{...}, ...]`` instead: the list ends where its brackets
balance. Neither template renders ``tool_calls``, so calls go back in the
content, in the syntax of the template at hand; vLLM's wraps results of role
``tools`` as ``{"result": ...}``; with the model's own, results go under the
``<|tool_response|>`` role token (as llama.cpp's Phi-4-mini template writes
them, which also renders ``tool_calls`` itself).
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import PayloadError, calls_from_json, json_list
from mp13_toolbox import ToolCall

_TAGGED = Opener("<|tool_call|>", ends=("<|/tool_call|>",), quoted='"')


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    text = payload.strip()
    try:
        return calls_from_json(text)
    except PayloadError:
        if ctx.opener is not _TAGGED or text[:1] != "{":
            raise
        return calls_from_json(f"[{text}]")  # parallel calls written without the list


PROFILE = Profile(
    name="phi4_mini",
    openers=(Opener("functools"), _TAGGED),
    decode=_decode,
    render=json_list("functools"),
    lenient_eof=True,
    detect=(r"functools", r"<\|/tool\|>", r"<\|/tool_call\|>"),
    messages=MessageStyle(calls_in_content=True, tool_role="tools"),
    variants=(
        # The model's own template: specs in the system message's "tools" field, calls
        # written into the content, results under the <|tool_response|> role token.
        (
            r"""message\[['"]tools['"]\]""",
            MessageStyle(
                calls_in_content=True,
                render=json_list("<|tool_call|>", "<|/tool_call|>"),
                tools_field="tools",
                tool_role="tool_response",
            ),
        ),
        # llama.cpp's template renders tool_calls itself, as <|tool_call|>{json}<|/tool_call|>.
        (r"<\|tool_call\|>", MessageStyle(arguments="object")),
    ),
)
