# SPDX-License-Identifier: MIT
"""Render a path of nodes as the chat messages a model sees.

Messages are canonical OpenAI-shaped dicts; the engine adapts them to each
model's chat template:

- the effective system message first (none for the template default, an empty
  one for "no system message");
- ``{"role": "user", "content"}`` per user turn;
- ``{"role": "assistant", "content", "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments": <dict>}}]}`` per assistant turn; a
  *continuation* turn is stitched into the assistant message before it, so a
  truncated reply and its continuations are one message;
- ``ToolResult.to_message()`` per tool result: ``{"role": "tool", "tool_call_id",
  "name", "content"}`` (no ``tool_call_id`` for a result without one).

Structural nodes contribute nothing. An assistant turn with no text and no tool
calls (an engine error, or cancelled before the first token) is left out, so a
failed turn does not confuse the next request. Reasoning is not sent back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mp13_context._model import Node, Role
from mp13_context._state import EffectiveState


def tool_call_message(call: Any) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": dict(call.arguments)},
    }


def render(path: Iterable[Node], state: EffectiveState) -> list[dict[str, Any]]:
    """The messages for ``path`` (root first) under the effective ``state``."""
    out: list[dict[str, Any]] = []
    system = state.system.message()
    if system is not None:
        out.append(system)
    for node in path:
        turn = node.turn
        if turn is None:
            continue
        if turn.role is Role.USER:
            out.append({"role": "user", "content": turn.text})
        elif turn.role is Role.ASSISTANT:
            calls = [tool_call_message(c) for c in turn.tool_calls]
            last = out[-1] if out else None
            if turn.continuation and last is not None and last["role"] == "assistant":
                last["content"] += turn.text
                if calls:
                    last.setdefault("tool_calls", []).extend(calls)
                continue
            if not turn.text and not calls:
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": turn.text}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.extend(result.to_message() for result in turn.tool_results)
    return out
