# SPDX-License-Identifier: Apache-2.0
"""``glm45``: GLM-4.5/4.6, ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...``.

Values are raw text (the template writes strings as-is and other values as
JSON), converted with the tool's JSON schema when known. ``<think>`` reasoning;
``<|user|>`` and ``<|observation|>`` end the assistant turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    THINK,
    DecodeContext,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._raw_values import raw_arguments, raw_text
from mp13_engine.toolcalls._values import PayloadError, bare_name
from mp13_toolbox import ToolCall

_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    head, _, _ = payload.partition("<arg_key>")
    name = bare_name(head)
    if not name or "\n" in name or "<" in name:
        raise PayloadError("expected the function name right after <tool_call>")
    rest = payload[len(head) :]
    pairs = _PAIR.findall(rest)
    if rest.count("<arg_key>") != len(pairs) or rest.count("<arg_value>") != len(pairs):
        raise PayloadError("every <arg_key> needs exactly one <arg_value> after it")
    return [ToolCall(name=name, arguments=raw_arguments(ctx.schemas, name, pairs))]


def _render(calls: Sequence[ToolCall]) -> str:
    out = []
    for c in calls:
        pairs = "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{raw_text(v)}</arg_value>\n"
            for k, v in c.arguments.items()
        )
        out.append(f"<tool_call>{c.name}\n{pairs}</tool_call>")
    return "\n".join(out)


PROFILE = Profile(
    name="glm45",
    openers=(
        Opener("<tool_call>", ends=("</tool_call>",), verbatim=(("<arg_value>", "</arg_value>"),)),
    ),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    stops=(*COMMON_STOPS, "<|user|>", "<|observation|>"),
    detect=(r"<arg_key>",),
)
