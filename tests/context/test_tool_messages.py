# SPDX-License-Identifier: MIT
"""A tool result reaches the model as ``ToolResult.to_message()``: one implementation."""

from __future__ import annotations

from mp13_context import NodeKind, Role, Turn
from mp13_toolbox import ToolCall, ToolResult


def test_tool_results_render_through_to_message(session):
    info = session.new_conversation()
    call = ToolCall("add", {"a": 1}, id="c1")
    node = session.append(info.root_id, NodeKind.TURN, Turn(role=Role.USER, text="hi"))
    node = session.append(node.id, NodeKind.TURN, Turn(role=Role.ASSISTANT, tool_calls=(call,)))
    results = (
        ToolResult(name="add", content="2", call_id="c1"),
        ToolResult(name="add", content="lost its id"),  # e.g. from an imported document
    )
    node = session.append(node.id, NodeKind.TURN, Turn(role=Role.TOOL, tool_results=results))
    messages = session.messages(node.id)
    assert messages[-2:] == [r.to_message() for r in results]
    assert messages[-2] == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "2"}
    assert "tool_call_id" not in messages[-1]  # not a null id the template would print
