# SPDX-License-Identifier: Apache-2.0
"""``deepseek_v3``: DeepSeek V3 / R1 full-width special tokens with a ```` ```json ```` block.

::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Each ``tool▁call`` block is one span; the ``tool▁calls`` section tokens are
wrappers. ``<think>`` reasoning, which R1/V3.1 templates may open in the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mp13_engine.toolcalls._profile import THINK, DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import PayloadError, bare_name, dumps, json_arguments
from mp13_toolbox import ToolCall

SEP = "<｜tool▁sep｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"


def json_args(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        if text.startswith("json"):
            text = text[4:]
        if not text.rstrip().endswith("```"):
            raise PayloadError("unterminated ```json block")
        text = text.rstrip()[:-3]
    return json_arguments(text)


def _decode_v3(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    _kind, sep, rest = payload.partition(SEP)
    if not sep:
        raise PayloadError("missing <｜tool▁sep｜>")
    name, _, args = rest.partition("\n")
    name = bare_name(name)
    if not name:
        raise PayloadError("missing function name")
    return [ToolCall(name=name, arguments=json_args(args))]


def _render_v3(calls: Sequence[ToolCall]) -> str:
    body = "\n".join(
        f"{CALL_BEGIN}function{SEP}{c.name}\n```json\n{dumps(c.arguments)}\n```{CALL_END}"
        for c in calls
    )
    return f"{CALLS_BEGIN}{body}{CALLS_END}"


PROFILE = Profile(
    name="deepseek_v3",
    openers=(Opener(CALL_BEGIN, ends=(CALL_END,), quoted='"'),),
    decode=_decode_v3,
    render=_render_v3,
    reasoning=THINK,
    close_only_reasoning=True,
    wrappers=(CALLS_BEGIN, CALLS_END),
    detect=(r"<｜tool▁calls▁begin｜>", r"tool▁sep"),
    # DeepSeek's own R1 template renders tool calls only when the content is None.
    messages=MessageStyle(arguments="object", content_none=None),
)
