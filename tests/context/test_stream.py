# SPDX-License-Identifier: MIT
"""``Cursor.astream``: leaving the stream stops its exchange, closed or just dropped."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from mp13_context import ChatContext, ContextError, CursorError, EventKind, Role
from mp13_context.testing import FakeReply
from mp13_toolbox import Toolbox, ToolCall

LONG = "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 4


def replies(cur):
    return [n.turn for n in cur.path() if n.turn and n.turn.role is Role.ASSISTANT]


def test_asking_right_after_a_break_waits_for_the_cancelled_reply(ctx, engine):
    """A plain break used to leave the cursor busy: the next aask raised CursorError."""
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        async for event in cur.astream("hi"):
            if event.kind is EventKind.TEXT:
                break
        return await cur.aask("next")

    assert asyncio.run(main()).text == "echo: next"
    first, second = replies(cur)
    assert first.cancelled and first.text and first.text != LONG
    assert second.text == "echo: next" and not second.cancelled
    users = [n for n in cur.path() if n.turn and n.turn.role is Role.USER]
    assert [u.turn.text for u in users] == ["hi", "next"]
    reply = next(n for n in cur.path() if n.turn and n.turn.role is Role.ASSISTANT)
    assert users[1].parent_id == reply.id  # asked below the cancelled reply


def test_a_dropped_stream_is_cancelled_without_another_ask(ctx, engine):
    engine.script(FakeReply(text=LONG, delay_s=0.05))  # about 5 s if it ran to the end
    cur = ctx.cursor()

    async def main():
        async for event in cur.astream("hi"):
            if event.kind is EventKind.TEXT:
                break
        for _ in range(20):
            if not cur.running:
                break
            await asyncio.sleep(0.01)
        return cur.running

    assert asyncio.run(main()) is False
    assert replies(cur)[0].cancelled and replies(cur)[0].text != LONG
    assert engine.cancelled  # the engine was told, not left generating


def test_a_stream_kept_by_name_runs_until_closed(ctx, engine):
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        events = cur.astream("hi")
        async for event in events:
            if event.kind is EventKind.TEXT:
                break
        await asyncio.sleep(0.05)
        still = cur.running
        await events.aclose()
        return still, cur.running

    assert asyncio.run(main()) == (True, False)
    assert replies(cur)[0].cancelled


@pytest.mark.parametrize("again", ["aretry", "acontinue", "abatch"])
def test_every_async_run_waits_for_a_dropped_stream(ctx, engine, again):
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        async for event in cur.astream("hi"):
            if event.kind is EventKind.TEXT:
                break
        if again == "abatch":
            return next(k.node.turn for k in await cur.abatch(["x"]))
        return await getattr(cur, again)()

    turn = asyncio.run(main())
    assert not turn.cancelled and turn.error is None
    nodes = cur.session.conversation_nodes(cur.conversation_id)
    assert [n.turn.text for n in nodes if n.turn and n.turn.cancelled] != []


def test_a_sync_call_right_after_a_break_says_why_and_the_next_aask_still_waits(ctx, engine):
    """The sync call cannot wait (it blocks the loop that records the cancelled reply),
    so it raises; it used to also make the dropped reply forgotten, and the next aask
    then raised CursorError too instead of waiting for it."""
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        async for event in cur.astream("hi"):
            if event.kind is EventKind.TEXT:
                break
        with pytest.raises(CursorError, match=r"dropped astream\(\).*await the async call"):
            cur.ask("too soon")
        with pytest.raises(CursorError, match="dropped astream"):
            cur.system.set("terse")
        return await asyncio.wait_for(cur.aask("next"), 5)

    assert asyncio.run(main()).text == "echo: next"
    first, second = replies(cur)
    assert first.cancelled and first.text != LONG
    assert not second.cancelled
    users = [n.turn.text for n in cur.path() if n.turn and n.turn.role is Role.USER]
    assert users == ["hi", "next"]  # the refused sync calls recorded nothing


def test_breaking_out_during_a_tool_round_gives_every_call_a_result(ctx, session, engine):
    started = asyncio.Event()

    async def slow() -> str:
        """Takes its time."""
        started.set()
        await asyncio.sleep(10)
        return "late"

    tb = Toolbox()
    tb.register(slow)
    tctx = ChatContext(session, engine=engine, toolbox=tb)
    engine.script(FakeReply(tool_calls=[ToolCall("slow", {}), ToolCall("slow", {})]), "done")
    cur = tctx.cursor()

    async def main():
        async for event in cur.astream("go"):
            if event.kind is EventKind.TOOL_CALL:
                break
        return await cur.aask("next")

    assert asyncio.run(main()).text == "done"
    tool = next(n.turn for n in cur.path() if n.turn and n.turn.role is Role.TOOL)
    assert [r.content for r in tool.tool_results] == ["cancelled", "cancelled"]
    assert [m["role"] for m in cur.messages()] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]


def test_aclosing_still_stops_and_waits(ctx, engine):
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        async with contextlib.aclosing(cur.astream("hi")) as events:
            async for event in events:
                if event.kind is EventKind.TEXT:
                    break
        return cur.running

    assert asyncio.run(main()) is False
    assert replies(cur)[0].cancelled


def test_aclose_from_another_task_stops_the_reply_and_ends_the_reader(ctx, engine):
    """A server closing the stream when its client leaves, while a reader task waits in
    it: aclose() used to raise RuntimeError (the generator was running) and the reply
    ran on to its end."""
    engine.script(FakeReply(text=LONG, delay_s=0.01))
    cur = ctx.cursor()

    async def main():
        events = cur.astream("hi")
        seen = []

        async def read():
            async for event in events:
                seen.append(event)

        reader = asyncio.ensure_future(read())
        while not any(e.kind is EventKind.TEXT for e in seen):
            await asyncio.sleep(0.005)
        await asyncio.wait_for(events.aclose(), 5)
        running = cur.running
        await asyncio.wait_for(reader, 5)  # ends, without a CancelledError of its own
        return running, reader.cancelled(), seen

    running, reader_cancelled, seen = asyncio.run(main())
    assert running is False and reader_cancelled is False
    reply = replies(cur)[0]
    assert reply.cancelled and reply.text != LONG
    assert engine.cancelled
    assert not any(e.kind is EventKind.DONE for e in seen)


def test_a_bad_parameter_surfaces_from_the_first_step(ctx):
    cur = ctx.cursor()

    async def main():
        return [e async for e in cur.astream("hi", no_such_param=1)]

    with pytest.raises(ContextError):
        asyncio.run(main())
    assert not cur.running
