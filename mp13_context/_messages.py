# SPDX-License-Identifier: MIT
"""Render a path of nodes as the chat messages a model sees.

Messages are canonical OpenAI-shaped dicts; the engine adapts them to each
model's chat template:

- the effective system message first (none for the template default, an empty
  one for "no system message");
- ``{"role": "user", "content"}`` per user turn;
- ``{"role": "assistant", "content", "tool_calls": [...]}`` per assistant turn,
  each call as ``ToolCall.to_openai()`` gives it (``{"id", "type": "function",
  "function": {"name", "arguments": <dict>}}``, no ``id`` for a call without
  one); a *continuation* turn is joined to the assistant message before it
  (``joined``), so a truncated reply and its continuations are one message;
- ``ToolResult.to_message()`` per tool result: ``{"role": "tool", "tool_call_id",
  "name", "content"}`` (no ``tool_call_id`` for a result without one).

Structural nodes contribute nothing. An assistant turn with no text and no tool
calls (an engine error, or cancelled before the first token) is left out, so a
failed turn does not confuse the next request. Reasoning is not sent back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from mp13_context._model import Node, Role, Turn
from mp13_context._settings import EffectiveSettings


def joined(parts: Sequence[Turn]) -> Turn:
    """An assistant reply and its continuations (in order) as one turn.

    The last part's fields with the text, reasoning and tool calls of every
    part joined: the one place a continued reply is put back together (the
    rendered messages and ``whole_turn`` both come from it).
    """
    if len(parts) == 1:
        return parts[0]
    return attrs.evolve(
        parts[-1],
        text="".join(p.text for p in parts),
        reasoning="".join(p.reasoning for p in parts),
        tool_calls=tuple(c for p in parts for c in p.tool_calls),
    )


def whole_turn(path: Sequence[Node]) -> Turn:
    """The turn of the last node of ``path`` (root first; a turn node: every caller
    passes one) as the model sees it: a continuation joined to the reply it
    continues. It carries that node's id."""
    node = path[-1]
    turn = node.turn
    assert turn is not None, "whole_turn needs a path that ends in a turn node"
    parts = [turn]
    if turn.role is Role.ASSISTANT and turn.continuation:
        for earlier in reversed(path[:-1]):
            part = earlier.turn
            if part is None:
                continue
            if part.role is not Role.ASSISTANT:
                break
            parts.append(part)
            if not part.continuation:
                break
        parts.reverse()
    return attrs.evolve(joined(parts), node_id=node.id)


def render(path: Iterable[Node], state: EffectiveSettings) -> list[dict[str, Any]]:
    """The messages for ``path`` (root first) under the effective ``state``."""
    out: list[dict[str, Any]] = []
    system = state.system.message()
    if system is not None:
        out.append(system)
    reply: list[Turn] = []  # an assistant turn and its continuations so far
    for node in path:
        turn = node.turn
        if turn is None:
            continue
        if turn.role is Role.ASSISTANT and turn.continuation and reply:
            reply.append(turn)
            continue
        _add_reply(out, reply)
        reply = []
        if turn.role is Role.USER:
            out.append({"role": "user", "content": turn.text})
        elif turn.role is Role.ASSISTANT:
            reply = [turn]
        else:
            out.extend(result.to_message() for result in turn.tool_results)
    _add_reply(out, reply)
    return out


def _add_reply(out: list[dict[str, Any]], parts: list[Turn]) -> None:
    if not parts:
        return
    turn = joined(parts)
    if not turn.text and not turn.tool_calls:
        return
    msg: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        msg["tool_calls"] = [c.to_openai() for c in turn.tool_calls]
    out.append(msg)
