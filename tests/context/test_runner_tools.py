# SPDX-License-Identifier: MIT
"""The runner with the real toolbox: tool rounds, views per node, approval, budgets, events."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from mp13_context import ChatContext, EventKind, Role
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall, ToolsScope


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def wipe_disk(path: str) -> str:
    """Delete everything under a path.

    Args:
        path: where
    """
    return f"wiped {path}"


@pytest.fixture
def toolbox():
    tb = Toolbox()
    tb.register(add)
    tb.register(wipe_disk, risk="high")
    return tb


@pytest.fixture
def tctx(session, engine, toolbox):
    return ChatContext(session, engine=engine, toolbox=toolbox)


def call(name, **args):
    return ToolCall(name, args)


def test_one_tool_round_then_answer(tctx, engine):
    engine.script(FakeReply(tool_calls=[call("add", a=2, b=3)]), "The sum is 5.")
    cur = tctx.cursor()
    turn = cur.ask("what is 2+3?")
    assert turn.text == "The sum is 5." and turn.auto
    roles = [n.turn.role for n in cur.path() if n.turn]
    assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    tool_msg = cur.messages()[2]
    call_id = cur.messages()[1]["tool_calls"][0]["id"]
    assert tool_msg == {"role": "tool", "tool_call_id": call_id, "name": "add", "content": "5"}
    # the second request saw the tool result, the first advertised the tools
    assert engine.requests[1].messages[-1]["content"] == "5"
    assert {t["function"]["name"] for t in engine.requests[0].tools} == {"add", "wipe_disk"}
    assert [t.role for t in cur.exchange()] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]


def test_tools_scope_of_the_node_decides_specs_and_execution(tctx, engine):
    cur = tctx.cursor()
    cur.tools.add(ToolsScope({"*": "disabled"}))
    cur.tools.add(ToolsScope({"add": "silent"}))
    engine.script(FakeReply(tool_calls=[call("add", a=1, b=1), call("wipe_disk", path="/")]), "ok")
    cur.ask("go")
    assert engine.requests[0].tools is None  # silent and disabled tools are not advertised
    results = next(n.turn for n in cur.path() if n.turn and n.turn.role is Role.TOOL).tool_results
    assert results[0].content == "2" and not results[0].is_error
    assert results[1].is_error  # disabled: never executed
    alt = cur.fork()
    alt.tools.reset()
    engine.script("plain")
    alt.ask("again")
    assert {t["function"]["name"] for t in engine.requests[-1].tools} == {"add", "wipe_disk"}
    cur.tools.pop()
    assert len(cur.tools.show()) == 1


def test_approval_callback_decides_high_risk_tools(session, engine, toolbox):
    asked = []

    def approve(req):
        asked.append(req.call.name)
        return "no"

    ctx = ChatContext(session, engine=engine, toolbox=toolbox, approval=approve)
    engine.script(FakeReply(tool_calls=[call("wipe_disk", path="/")]), "fine, I won't")
    cur = ctx.cursor()
    cur.ask("clean up")
    assert asked == ["wipe_disk"]
    result = cur.exchange()[2].tool_results[0]
    assert result.is_error and "wiped" not in result.content


def test_tool_round_limit_gives_every_call_a_result_and_stops(tctx, engine):
    cur = tctx.cursor()
    cur.params.set(max_tool_rounds=2)
    loop = FakeReply(tool_calls=[call("add", a=1, b=2)])
    engine.script(loop, loop, loop, "never reached")
    turn = cur.ask("loop forever")
    assert len(engine.requests) == 3
    tools = [t for t in cur.exchange() if t.role is Role.TOOL]
    assert len(tools) == 3
    assert tools[-1].tool_results[0].is_error
    assert "limit of 2 tool rounds" in tools[-1].tool_results[0].content
    assert turn.tool_calls  # the final reply is the one whose calls were refused
    assert engine.pending == 1


def test_per_turn_call_budget(tctx, engine):
    cur = tctx.cursor()
    cur.params.set(max_tool_calls=1)
    engine.script(FakeReply(tool_calls=[call("add", a=1, b=2), call("add", a=3, b=4)]), "done")
    cur.ask("two calls")
    results = cur.exchange()[2].tool_results
    assert [r.is_error for r in results] == [False, True]


def test_tool_exceptions_become_error_results_and_the_turn_goes_on(tctx, engine, toolbox):
    def broken() -> str:
        """Always fails."""
        raise ValueError("no luck")

    toolbox.register(broken)
    engine.script(FakeReply(tool_calls=[call("broken")]), "sorry")
    cur = tctx.cursor()
    assert cur.ask("try").text == "sorry"
    result = cur.exchange()[2].tool_results[0]
    assert result.is_error and "no luck" in result.content


def test_events_mirror_the_recorded_tree(tctx, engine):
    engine.chunk_size = 2
    engine.script(FakeReply(tool_calls=[call("add", a=2, b=2)]), "four")
    events = []
    cur = tctx.cursor()
    turn = cur.ask("2+2", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.USER and kinds[-1] is EventKind.DONE
    assert EventKind.TOOL_CALL in kinds and EventKind.TOOL_RESULT in kinds
    assert "".join(e.text for e in events if e.kind is EventKind.TEXT) == "four"
    recorded = [e.node_id for e in events if e.kind in (EventKind.USER, EventKind.TURN)]
    assert recorded == [n.id for n in cur.path() if n.turn]
    assert events[-1].turn == turn


def test_astream_yields_events_and_records(tctx):
    cur = tctx.cursor()

    async def main():
        return [e async for e in cur.astream("hi")]

    events = asyncio.run(main())
    assert events[-1].kind is EventKind.DONE and events[-1].turn.text == "echo: hi"
    assert cur.node.turn.text == "echo: hi"


def test_astream_closed_early_with_aclosing_cancels_the_reply_at_once(tctx, engine):
    # aclosing() closes the stream, cancelling the reply before the block exits (a bare
    # break does it when the stream is dropped: tests/context/test_stream.py).
    cur = tctx.cursor()
    engine.script(FakeReply(text="a b c d e f g h i j k l m n o p", delay_s=0.01))

    async def main():
        async with contextlib.aclosing(cur.astream("hi")) as events:
            async for event in events:
                if event.kind is EventKind.TEXT:
                    break
        assert not cur.running
        return await cur.aask("next")

    assert asyncio.run(main()).text == "echo: next"
    replies = [n.turn for n in cur.path() if n.turn and n.turn.role is Role.ASSISTANT]
    assert replies[0].cancelled and replies[0].text != "a b c d e f g h i j k l m n o p"


def test_async_approval_in_a_batch(session, toolbox):
    engine = FakeEngine()

    async def approve(req):
        await asyncio.sleep(0)
        return "yes"

    ctx = ChatContext(session, engine=engine, toolbox=toolbox, approval=approve)
    engine.script(
        FakeReply(tool_calls=[call("wipe_disk", path="/a")]),
        FakeReply(tool_calls=[call("wipe_disk", path="/b")]),
        "done",
        "done",
    )
    kids = ctx.cursor().batch(["a", "b"])
    contents = sorted(k.exchange()[2].tool_results[0].content for k in kids)
    assert contents == ["wiped /a", "wiped /b"]


def test_cancelling_during_a_tool_round_gives_every_call_a_result(tctx, engine, toolbox):
    # A threading event: an async tool runs on its own loop, not the caller's.
    started = threading.Event()

    async def slow() -> str:
        """Takes its time."""
        started.set()
        await asyncio.sleep(10)
        return "late"

    toolbox.register(slow)
    engine.script(
        FakeReply(tool_calls=[call("add", a=1, b=1), call("slow"), call("add", a=2, b=2)])
    )
    cur = tctx.cursor()

    async def main():
        task = asyncio.ensure_future(cur.aask("go"))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    results = cur.node.turn.tool_results
    assert [r.content for r in results] == ["2", "cancelled", "cancelled"]
    assert [m["role"] for m in cur.messages()] == ["user", "assistant", "tool", "tool", "tool"]
    engine.script("fine")
    assert cur.ask("next").text == "fine"


def test_reasoning_streams_as_events_and_is_kept_on_the_turn(tctx, engine):
    engine.script(FakeReply(text="four", reasoning="two and two"))
    events = []
    turn = tctx.cursor().ask("2+2", on_event=events.append)
    streamed = "".join(e.text for e in events if e.kind is EventKind.REASONING)
    assert streamed == turn.reasoning == "two and two" and turn.text == "four"


def test_cancel_while_tools_run_has_no_request_to_cancel(tctx, engine, toolbox):
    cur = tctx.cursor()
    answers = []

    def look() -> str:
        """Looks around."""
        answers.append(cur.cancel())  # between requests: nothing in flight
        return "seen"

    toolbox.register(look)
    engine.script(FakeReply(tool_calls=[call("look")]), "done")
    assert cur.ask("look").text == "done"
    assert answers == [False] and cur.exchange()[2].tool_results[0].content == "seen"


def test_a_toolbox_that_raises_still_gives_the_call_a_result(session, engine):
    class Broken(Toolbox):
        async def aexecute(self, call, view=None, approval=None, budget=None):
            raise RuntimeError("toolbox bug")

    tb = Broken()
    tb.register(add)
    ctx = ChatContext(session, engine=engine, toolbox=tb)
    engine.script(FakeReply(tool_calls=[ToolCall("add", {"a": 1, "b": 2}, id="c7")]), "sorry")
    cur = ctx.cursor()
    assert cur.ask("add").text == "sorry"
    (result,) = cur.exchange()[2].tool_results
    assert result.is_error and result.call_id == "c7"
    assert result.content == "tool add failed: RuntimeError: toolbox bug"
