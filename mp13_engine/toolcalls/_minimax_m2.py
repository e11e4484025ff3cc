# SPDX-License-Identifier: Apache-2.0
"""``minimax_m2``: MiniMax-M2 XML invocations with raw-text parameter values.

::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Values are converted with the tool's JSON schema when known (best-effort
literal guess otherwise). ``<think>`` reasoning (interleaved thinking).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._minimax import STOPS
from mp13_engine.toolcalls._profile import THINK, DecodeContext, Opener, Profile
from mp13_engine.toolcalls._raw_values import raw_arguments, raw_text, strip_layout
from mp13_engine.toolcalls._values import PayloadError, bare_name
from mp13_toolbox import ToolCall

_INVOKE = re.compile(r"<invoke\s+name=\"?([^\">]*)\"?\s*>(.*?)</invoke>", re.S)
_PARAM = re.compile(r"<parameter\s+name=\"?([^\">]*)\"?\s*>(.*?)</parameter>", re.S)


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    calls = []
    for m in _INVOKE.finditer(payload):
        name = bare_name(m.group(1))
        if not name:
            raise PayloadError("<invoke> has no name")
        pairs = [(pm.group(1), strip_layout(pm.group(2))) for pm in _PARAM.finditer(m.group(2))]
        calls.append(ToolCall(name=name, arguments=raw_arguments(ctx.schemas, name, pairs)))
    if payload.count("<invoke") != len(calls):
        raise PayloadError("an <invoke> block is not closed")
    return calls


def _render(calls: Sequence[ToolCall]) -> str:
    body = "".join(
        f'<invoke name="{c.name}">\n'
        + "".join(
            f'<parameter name="{k}">{raw_text(v)}</parameter>\n' for k, v in c.arguments.items()
        )
        + "</invoke>\n"
        for c in calls
    )
    return f"<minimax:tool_call>\n{body}</minimax:tool_call>"


PROFILE = Profile(
    name="minimax_m2",
    openers=(
        Opener(
            "<minimax:tool_call>",
            ends=("</minimax:tool_call>",),
            verbatim=(("<parameter name=", "</parameter>"),),
        ),
    ),
    decode=_decode,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    stops=STOPS,
    detect=(r"<minimax:tool_call>",),
)
