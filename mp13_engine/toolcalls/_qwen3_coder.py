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
A value may mention any closing tag as text: it ends at its ``</parameter>``.
Values are converted with the tool's JSON schema when known. As in the
reference parser, a missing ``</tool_call>`` at the end is tolerated, but only
when every ``<function=...>`` block is closed (never a partial call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import (
    THINK,
    DecodeContext,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._raw_values import raw_arguments, raw_text, strip_layout
from mp13_engine.toolcalls._values import PayloadError, bare_name
from mp13_toolbox import ToolCall

#: Raw parameter values may mention any closing tag as text (code often does).
PARAMETERS = (("<parameter=", "</parameter>"),)
FUNCTION_OPENER = Opener("<function=", ends=("</function>",), verbatim=PARAMETERS)
_FUNCTION = re.compile(r"<function=([^>\n]*)>")
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>")
_TAG = re.compile(r"<parameter=|</function>|<function=")


def _value_end(body: str, start: int) -> tuple[int, int]:
    """Where a parameter value starting at ``start`` ends, and where reading goes on.

    A value ends at its ``</parameter>``, so it may mention ``</function>`` or
    ``</tool_call>`` as text (code often does). As in the reference parser, a
    value whose closer is missing ends at the next ``<parameter=`` or
    ``</function>`` instead.
    """
    close = body.find("</parameter>", start)
    nxt = body.find("<parameter=", start)
    if close >= 0 and (nxt < 0 or close < nxt):
        return close, close + len("</parameter>")
    ends = [i for i in (nxt, body.find("</function>", start)) if i >= 0]
    end = min(ends) if ends else len(body)
    return end, end


def _calls(body: str, ctx: DecodeContext) -> list[ToolCall]:
    calls = []
    pos = 0
    while (fm := _FUNCTION.search(body, pos)) is not None:
        name = bare_name(fm.group(1))
        if not name:
            raise PayloadError("<function=...> has no name")
        pairs: list[tuple[str, str]] = []
        pos, closed = fm.end(), False
        while (tm := _TAG.search(body, pos)) is not None and tm.group() != "<function=":
            if tm.group() == "</function>":
                pos, closed = tm.end(), True
                break
            pm = _PARAMETER.match(body, tm.start())
            if pm is None:
                break
            end, pos = _value_end(body, pm.end())
            pairs.append((pm.group(1), strip_layout(body[pm.end() : end])))
        if ctx.truncated and not closed:
            raise PayloadError("<function=...> is not closed")
        calls.append(ToolCall(name=name, arguments=raw_arguments(ctx.schemas, name, pairs)))
    if not calls:
        raise PayloadError("no <function=...> block")
    return calls


def decode_functions(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    """Decoder for a wrapper's body, or for a bare ``<function=`` span (``FUNCTION_OPENER``)."""
    if ctx.opener is FUNCTION_OPENER:
        closing = "" if ctx.truncated else "</function>"
        return _calls("<function=" + payload + closing, ctx)
    return _calls(payload, ctx)


def render_function(c: ToolCall, sep: str) -> str:
    """One ``<function=...>`` block; ``sep`` is the layout around each value."""
    params = "".join(
        f"<parameter={k}>{sep}{raw_text(v)}{sep}</parameter>\n" for k, v in c.arguments.items()
    )
    return f"<function={c.name}>\n{params}</function>"


def _render(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"<tool_call>\n{render_function(c, chr(10))}\n</tool_call>" for c in calls)


PROFILE = Profile(
    name="qwen3_coder",
    openers=(Opener("<tool_call>", ends=("</tool_call>",), verbatim=PARAMETERS), FUNCTION_OPENER),
    decode=decode_functions,
    render=_render,
    reasoning=THINK,
    close_only_reasoning=True,
    lenient_eof=True,
    wrappers=("</tool_call>",),
    detect=(r"<function=", r"<parameter="),
)
