# SPDX-License-Identifier: Apache-2.0
"""``llama3_json``: Llama 3.1-3.3 custom tools, ``{"name": ..., "parameters": {...}}``.

The call is a bare JSON object (optionally after ``<|python_tag|>``); several
calls are separated by ``;``. ``arguments`` is accepted in place of
``parameters``. There is no closing tag: the payload ends where its braces
balance, so a call is emitted the moment its last ``}`` arrives.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import calls_from_json, json_each
from mp13_toolbox import ToolCall

_ARGS_KEYS = ("parameters", "arguments")

#: A bare ``{"name"`` object (optionally after a ``;`` separator); shared with Llama 4.
JSON_OPENER = Opener(
    r'(?:;\s*)?\{\s*"name"',
    regex=True,
    partial=r';\s*$|(?:;\s*)?\{\s*(?:"(?:n(?:a(?:m(?:e)?)?)?)?)?$',
    keep_from="{",
)


def decode_json_call(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    """A ``{"name": ..., "parameters": {...}}`` payload (``arguments`` accepted too)."""
    # Without a call token a {"name": ...} may be JSON in the prose: require the arguments.
    return calls_from_json(payload.strip(), args_keys=_ARGS_KEYS, require_args=ctx.opener.regex)


PROFILE = Profile(
    name="llama3_json",
    openers=(Opener("<|python_tag|>"), JSON_OPENER),
    decode=decode_json_call,
    render=json_each(sep="; ", key="parameters"),
    wrappers=("<|python_tag|>",),
    detect=(r"<\|python_tag\|>", r"\"parameters\": dictionary of argument name"),
    # The template raises on several calls in one message: those go back as content.
    messages=MessageStyle(arguments="object", max_calls=1),
)
