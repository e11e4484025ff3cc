# SPDX-License-Identifier: Apache-2.0
"""``qwen3_coder`` and ``seed_oss``: XML calls with raw-text parameter values.

qwen3_coder::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    value (raw text, may span lines)
    </parameter>
    </function>
    </tool_call>

seed_oss is the same inside ``<seed:tool_call>...</seed:tool_call>`` with
``<seed:think>`` reasoning. A bare ``<function=...>...</function>`` (no
wrapper) is accepted, as the reference parser does. One newline right after
the opening and right before the closing parameter tag is layout, not value.
Values are converted with the tool's JSON schema when known. As in the
reference parser, a missing ``</tool_call>`` at the end is tolerated, but only
when every ``<function=...>`` block is closed (never a partial call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    THINK,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import (
    PayloadError,
    bare_name,
    convert_value,
    dumps,
    param_schema,
)
from mp13_toolbox import ToolCall

_FUNC = re.compile(r"<function=([^>\n]*)>(.*?)(</function>|$)", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)


def _strip_layout(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _calls(body: str, ctx: DecodeContext) -> list[ToolCall]:
    calls = []
    for fm in _FUNC.finditer(body):
        name = bare_name(fm.group(1))
        if not name:
            raise PayloadError("<function=...> has no name")
        if ctx.truncated and not fm.group(3):
            raise PayloadError("<function=...> is not closed")
        args: dict[str, Any] = {}
        for pm in _PARAM.finditer(fm.group(2)):
            key = pm.group(1).strip()
            raw = _strip_layout(pm.group(2))
            args[key] = convert_value(raw, param_schema(ctx.schemas, name, key))
        calls.append(ToolCall(name=name, arguments=args))
    if not calls:
        raise PayloadError("no <function=...> block")
    return calls


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    if ctx.opener.kind == "function":
        return _calls("<function=" + payload + "</function>", ctx)
    return _calls(payload, ctx)


def _value(v: Any) -> str:
    return v if isinstance(v, str) else dumps(v)


def _function(c: ToolCall, sep: str) -> str:
    params = "".join(
        f"<parameter={k}>{sep}{_value(v)}{sep}</parameter>\n" for k, v in c.arguments.items()
    )
    return f"<function={c.name}>\n{params}</function>"


def _render_qwen(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"<tool_call>\n{_function(c, chr(10))}\n</tool_call>" for c in calls)


def _render_seed(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"<seed:tool_call>\n{_function(c, '')}\n</seed:tool_call>" for c in calls)


PROFILES = MappingProxyType(
    {
        "qwen3_coder": Profile(
            name="qwen3_coder",
            openers=(
                Opener("<tool_call>", ends=("</tool_call>",)),
                Opener("<function=", ends=("</function>",), kind="function"),
            ),
            decode=_decode,
            render=_render_qwen,
            reasoning=THINK,
            close_only_reasoning=True,
            lenient_eof=True,
            wrappers=("</tool_call>",),
            detect=(r"<function=", r"<parameter="),
            messages=MessageStyle(arguments="object"),
        ),
        "seed_oss": Profile(
            name="seed_oss",
            openers=(
                Opener("<seed:tool_call>", ends=("</seed:tool_call>",)),
                Opener("<function=", ends=("</function>",), kind="function"),
            ),
            decode=_decode,
            render=_render_seed,
            reasoning=(("<seed:think>", "</seed:think>"),),
            close_only_reasoning=True,
            stops=(*COMMON_STOPS, "<seed:eos>"),
            lenient_eof=True,
            wrappers=("</seed:tool_call>", "<seed:bos>"),
            detect=(r"<seed:tool_call>", r"seed:think"),
            messages=MessageStyle(arguments="object"),
        ),
    }
)
