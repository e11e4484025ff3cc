# SPDX-License-Identifier: Apache-2.0
"""``qwen3_coder``: Qwen3-Coder XML calls with raw-text parameter values.

::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    value (raw text, may span lines)
    </parameter>
    </function>
    </tool_call>

A bare ``<function=...>...</function>`` (no
wrapper) is accepted, as the reference parser does. One newline right after
the opening and right before the closing parameter tag is layout, not value.
Values are converted with the tool's JSON schema when known. As in the
reference parser, a missing ``</tool_call>`` at the end is tolerated, but only
when every ``<function=...>`` block is closed (never a partial call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mp13_engine.toolcalls._profile import (
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

FUNCTION_OPENER = Opener("<function=", ends=("</function>",))
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


def decode_functions(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    """Decoder for a wrapper's body, or for a bare ``<function=`` span (``FUNCTION_OPENER``)."""
    if ctx.opener is FUNCTION_OPENER:
        closing = "" if ctx.truncated else "</function>"
        return _calls("<function=" + payload + closing, ctx)
    return _calls(payload, ctx)


def _value(v: Any) -> str:
    return v if isinstance(v, str) else dumps(v)


def render_function(c: ToolCall, sep: str) -> str:
    """One ``<function=...>`` block; ``sep`` is the layout around each value."""
    params = "".join(
        f"<parameter={k}>{sep}{_value(v)}{sep}</parameter>\n" for k, v in c.arguments.items()
    )
    return f"<function={c.name}>\n{params}</function>"


def _render(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"<tool_call>\n{render_function(c, chr(10))}\n</tool_call>" for c in calls)


PROFILE = Profile(
    name="qwen3_coder",
    openers=(Opener("<tool_call>", ends=("</tool_call>",)), FUNCTION_OPENER),
    decode=decode_functions,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    lenient_eof=True,
    wrappers=("</tool_call>",),
    detect=(r"<function=", r"<parameter="),
    messages=MessageStyle(arguments="object"),
)
