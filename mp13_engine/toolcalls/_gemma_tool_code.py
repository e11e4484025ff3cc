# SPDX-License-Identifier: Apache-2.0
"""``gemma_tool_code``: Gemma's prompt-level tool use, a ```` ```tool_code ```` block.

::

    ```tool_code
    print(get_weather(city="Paris"))
    ```

Each line is a call, optionally wrapped in ``print(...)``; arguments are Python
literals (read with ``ast``, never evaluated). Positional arguments are named
from the tool's schema order (``argN`` when the tool is unknown). Results go
back as a user turn holding a ```` ```tool_output ```` block, since Gemma's
template has no tool role.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import DecodeContext, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import PayloadError, parse_module, py_call, python_call
from mp13_toolbox import ToolCall


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    calls = []
    for stmt in parse_module(payload).body:
        if not isinstance(stmt, ast.Expr):
            raise PayloadError("tool_code may only contain calls")
        node = stmt.value
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
        ):
            node = node.args[0]
        calls.append(python_call(node, ctx.schemas))
    return calls


def _render(calls: Sequence[ToolCall]) -> str:
    lines = "\n".join(f"print({py_call(c)})" for c in calls)
    return f"```tool_code\n{lines}\n```"


PROFILE = Profile(
    name="gemma_tool_code",
    openers=(Opener("```tool_code", ends=("```",), quoted="\"'"),),
    decode=_decode,
    render=_render,
    detect=(r"tool_code",),
    messages=MessageStyle(
        calls_in_content=True,
        tool_role="user",
        tool_content="```tool_output\n{content}\n```",
        merge_tool_results=True,
    ),
)
