# SPDX-License-Identifier: MIT
"""Through the turn runner, a tool's failure is a result and the turn goes on (issue 11.9).

A tool raising ``SystemExit``, ``GeneratorExit`` or its own ``CancelledError`` must
not end the turn or leave a call without a result in the tree; the model reads the
error and answers. Only the cancellation of the caller's task ends the turn.
"""

from __future__ import annotations

import asyncio

import pytest

from mp13_context import ChatContext, Role
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall


def exits() -> str:
    """Exits like argparse on bad arguments."""
    raise SystemExit(2)


def closes() -> str:
    """Raises GeneratorExit."""
    raise GeneratorExit


async def cancels_itself() -> str:
    """Cancels itself, as a tool whose inner task was cancelled does."""
    raise asyncio.CancelledError


def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


@pytest.mark.parametrize("stream", [False, True])
def test_tools_that_raise_base_exceptions_give_results_and_the_turn_goes_on(session, stream):
    tb = Toolbox()
    for tool in (exits, closes, cancels_itself, add):
        tb.register(tool)
    engine = FakeEngine()
    calls = [ToolCall(n) for n in ("exits", "closes", "cancels_itself")]
    engine.script(FakeReply(tool_calls=[*calls, ToolCall("add", {"a": 1, "b": 2})]), "ok")
    events = []
    ctx = ChatContext(session, engine=engine, toolbox=tb)
    cur = ctx.cursor()
    turn = cur.ask("go", on_event=events.append if stream else None)
    assert turn.text == "ok" and turn.error is None
    tool_turn = next(t for t in cur.exchange() if t.role is Role.TOOL)
    results = {r.name: r for r in tool_turn.tool_results}
    assert len(tool_turn.tool_results) == 4
    assert "SystemExit, status 2" in results["exits"].content
    assert "GeneratorExit" in results["closes"].content
    assert "cancelled from inside" in results["cancels_itself"].content
    assert all(results[n].is_error for n in ("exits", "closes", "cancels_itself"))
    assert results["add"].content == "3" and not results["add"].is_error
    # every call id of the assistant turn has exactly one result, and the model saw them
    call_ids = [c.id for c in cur.exchange()[1].tool_calls]
    assert sorted(r.call_id for r in tool_turn.tool_results) == sorted(call_ids)
    assert [m["role"] for m in engine.requests[1].messages][-4:] == ["tool"] * 4


def test_a_callback_that_raises_mid_round_keeps_what_the_tools_did(session):
    # The reply and the results were lost: the tree held only the user turn although
    # the first tool had run (and acted). Now the round is recorded, the call that
    # did not run says so, and the callback's exception still reaches the caller.
    ran = []

    def act(x: int) -> str:
        """Act."""
        ran.append(x)
        return f"did {x}"

    tb = Toolbox()
    tb.register(act)
    engine = FakeEngine()
    engine.script(
        FakeReply(text="on it", tool_calls=[ToolCall("act", {"x": 1}), ToolCall("act", {"x": 2})])
    )

    def ui(event):
        if event.kind.value == "tool_result":
            raise RuntimeError("ui broke")

    cur = ChatContext(session, engine=engine, toolbox=tb).cursor()
    with pytest.raises(RuntimeError, match="ui broke"):
        cur.ask("go", on_event=ui)
    assert ran == [1]
    reply, tool_turn = cur.exchange()[1:]
    assert reply.text == "on it" and len(reply.tool_calls) == 2
    first, second = tool_turn.tool_results
    assert (first.content, first.is_error) == ("did 1", False)
    assert second.is_error and second.content == "not executed: the turn stopped (RuntimeError)"
    assert [r.call_id for r in tool_turn.tool_results] == [c.id for c in reply.tool_calls]
