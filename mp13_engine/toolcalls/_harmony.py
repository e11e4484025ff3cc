# SPDX-License-Identifier: Apache-2.0
"""``harmony``: OpenAI gpt-oss messages, ``<|channel|>NAME [to=RECIPIENT]<|message|>BODY<|end|>``.

The output after the prompt's ``<|start|>assistant`` is a sequence of
messages: ``analysis`` bodies are reasoning, ``final`` (and ``commentary``
without a recipient) bodies are content, and a body addressed ``to=functions.X``
is a tool call whose body is the JSON arguments, closed by ``<|call|>``.
Each header (``<|start|>...`` or ``<|channel|>...`` up to ``<|message|>``) is a
span whose decoder switches the machine into the mode for the body.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import (
    DecodeContext,
    Decoder,
    Opener,
    Profile,
    Switch,
)
from mp13_engine.toolcalls._values import PayloadError, bare_name, dumps, json_arguments
from mp13_toolbox import ToolCall

_BODY_END = ("<|call|>", "<|end|>", "<|return|>")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")


def _tool_body(name: str) -> Decoder:
    def decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
        text = payload.strip()
        if ctx.truncated and not text:
            raise PayloadError("the call's body never came")
        return [ToolCall(name=name, arguments=json_arguments(text))]

    return decode


def _decode_header(payload: str, ctx: DecodeContext) -> Switch:
    if ctx.truncated:
        raise PayloadError("message header without <|message|>")
    header = ctx.opener_text + payload
    recipient = _RECIPIENT.search(header)
    channel = _CHANNEL.search(header)
    if recipient is not None:
        name = bare_name(recipient.group(1))
        if not name:
            raise PayloadError("empty recipient")
        return Switch("span", closes=_BODY_END, decode=_tool_body(name), quoted='"')
    if channel is not None and channel.group(1) == "analysis":
        return Switch("reasoning", closes=_BODY_END)
    return Switch("text")


def _render(calls: Sequence[ToolCall]) -> str:
    return "<|start|>assistant".join(
        f"<|channel|>commentary to=functions.{c.name} <|constrain|>json<|message|>"
        f"{dumps(c.arguments)}<|call|>"
        for c in calls
    )


PROFILE = Profile(
    name="harmony",
    openers=(
        Opener("<|start|>", ends=("<|message|>",)),
        Opener("<|channel|>", ends=("<|message|>",)),
        # The prompt ends with "<|start|>assistant", so a call's role header may begin
        # the output: " to=functions.NAME<|channel|>commentary json<|message|>{...}".
        Opener("to=functions.", ends=("<|message|>",)),
    ),
    decode=_decode_header,
    render=_render,
    stops=("<|end|>", "<|return|>", "<|call|>", "<|endoftext|>"),
    # Engines usually cut the stop token <|call|> from the text: accept a complete body.
    lenient_eof=True,
    detect=(r"<\|channel\|>",),
)
