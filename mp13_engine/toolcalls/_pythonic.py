# SPDX-License-Identifier: Apache-2.0
"""``pythonic``: a Python list of calls, ``[f(a=1), g()]`` (Llama 3.2, Gemma 3 tool templates).

The list is recognised by its ``[name(`` start and ends where its brackets
balance (Python strings in either quote). Arguments are Python
literals read with ``ast`` (never evaluated); ``true``/``false``/``null`` are
accepted as JSON spellings. Positional arguments are named from the tool's
schema order (``argN`` when unknown).
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._profile import (
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._values import decode_python_list, py_call
from mp13_toolbox import ToolCall

LIST_OPENER = Opener(
    r"\[\s*[A-Za-z_][\w.]*\s*\(",
    regex=True,
    partial=r"\[\s*(?:[A-Za-z_][\w.]*\s*)?$",
    keep_from="[",
    quotes="\"'",
)


def render_python_list(calls: Sequence[ToolCall]) -> str:
    return "[" + ", ".join(py_call(c) for c in calls) + "]"


PROFILE = Profile(
    name="pythonic",
    openers=(LIST_OPENER,),
    decode=decode_python_list,
    render=render_python_list,
    detect=(r"func_name1\(",),
    # Calls go back as content in our own syntax: the vLLM Gemma 3 pythonic template
    # drops the commas between keyword arguments when it renders tool_calls itself.
    messages=MessageStyle(calls_in_content=True),
)
