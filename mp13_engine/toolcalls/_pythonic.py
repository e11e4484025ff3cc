# SPDX-License-Identifier: Apache-2.0
"""``pythonic`` and ``llama4_pythonic``: a Python list of calls, ``[f(a=1), g()]``.

Used by Llama 3.2 / Gemma 3 tool templates (pythonic) and Llama 4
(``<|python_start|>...<|python_end|>`` optional). Arguments are Python
literals read with ``ast`` (never evaluated); ``true``/``false``/``null`` are
accepted as JSON spellings. Positional arguments are named from the tool's
schema order (``argN`` when unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import py_repr, python_call_list
from mp13_toolbox import ToolCall

_LIST = Opener(
    r"\[\s*[A-Za-z_][\w.]*\s*\(",
    regex=True,
    partial=r"\[\s*(?:[A-Za-z_][\w.]*\s*)?$",
    keep_from="[",
    quotes="\"'",
)


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    return python_call_list(payload, ctx.schemas)


def _render(calls: Sequence[ToolCall]) -> str:
    body = ", ".join(
        f"{c.name}(" + ", ".join(f"{k}={py_repr(v)}" for k, v in c.arguments.items()) + ")"
        for c in calls
    )
    return f"[{body}]"


PROFILES = MappingProxyType(
    {
        "pythonic": Profile(
            name="pythonic",
            openers=(_LIST,),
            decode=_decode,
            render=_render,
            detect=(r"func_name1\(",),
            # Calls go back as content in our own syntax: the vLLM Gemma 3 pythonic template
            # drops the commas between keyword arguments when it renders tool_calls itself.
            messages=MessageStyle(calls_in_content=True),
        ),
        "llama4_pythonic": Profile(
            name="llama4_pythonic",
            openers=(Opener("<|python_start|>", ends=("<|python_end|>",)), _LIST),
            decode=_decode,
            render=_render,
            stops=(*COMMON_STOPS, "<|eot|>", "<|eom|>"),
            wrappers=("<|python_end|>",),
            lenient_eof=True,
            detect=(r"<\|python_start\|>", r"<\|header_start\|>"),
            messages=MessageStyle(arguments="object"),
        ),
    }
)
