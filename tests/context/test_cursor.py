# SPDX-License-Identifier: MIT
"""Cursors: asking, navigation, forks, batches, try-outs, retry, continue, trim, scopes."""

from __future__ import annotations

import asyncio

import pytest

from mp13_context import (
    ChatContext,
    Command,
    CommandError,
    CommandKind,
    ContextError,
    CursorError,
    EventKind,
    NodeKind,
    Role,
    Session,
    SystemMode,
)
from mp13_context.testing import FakeEngine, FakeReply
from mp13_engine import Chunk, FinishReason
from mp13_toolbox import ToolCall


def contents(cur):
    return [(m["role"], m["content"]) for m in cur.messages()]


def test_ask_records_user_and_reply_and_moves_cursor(ctx):
    cur = ctx.cursor(title="t")
    turn = cur.ask("Hi")
    assert turn.role is Role.ASSISTANT and turn.text == "echo: Hi"
    assert turn.node_id == cur.node_id
    assert cur.node.turn.text == "echo: Hi"
    assert contents(cur) == [("user", "Hi"), ("assistant", "echo: Hi")]
    assert turn.metrics is not None and turn.finish_reason is FinishReason.STOP


def test_messages_are_exactly_what_the_engine_receives(ctx, engine):
    cur = ctx.cursor()
    cur.system.set("be brief")
    cur.ask("one")
    expected = [*cur.messages(), {"role": "user", "content": "two"}]
    cur.ask("two")
    assert list(engine.requests[-1].messages) == expected


def test_system_commands_set_add_pop_none_default(ctx, engine):
    cur = ctx.cursor()
    cur.system.set("A")
    cur.system.add("B")
    assert cur.system.show().text == "A\n\nB"
    cur.system.pop()
    assert cur.system.show().text == "A"
    cur.system.none()
    assert cur.messages()[0] == {"role": "system", "content": ""}
    cur.system.default()
    assert cur.system.show().mode is SystemMode.DEFAULT
    assert cur.messages() == []
    cur.system.pop()  # undo default -> none
    assert cur.system.show().mode is SystemMode.NONE


def test_pop_with_nothing_to_pop_is_refused(ctx):
    cur = ctx.cursor()
    # The message names methods the handles have (there is no system.reset()).
    with pytest.raises(CommandError, match=r"nothing to pop.*system\.default\(\) instead"):
        cur.system.pop()
    with pytest.raises(CommandError, match=r"adapters\.set\(\.\.\.\) or adapters\.default\(\)"):
        cur.adapters.pop()
    with pytest.raises(CommandError, match=r"tools\.set\(\.\.\.\) or tools\.reset\(\)"):
        cur.tools.pop()


def test_unknown_or_bad_params_are_refused_with_the_known_names(ctx):
    cur = ctx.cursor()
    with pytest.raises(
        CommandError, match=r"'temprature' \(did you mean 'temperature'\?\); known parameters"
    ):
        cur.params.set(temprature=0.1)
    with pytest.raises(CommandError, match="top_p"):
        cur.params.set(top_p=0)
    # The context's own limits (not Request fields) are whole numbers with a floor.
    for name, value, low in (("max_tool_calls", 0, 1), ("max_tool_rounds", True, 0)):
        with pytest.raises(CommandError) as err:
            cur.params.set(**{name: value})
        assert str(err.value) == f"parameter {name} must be an integer >= {low}, got {value!r}"
    with pytest.raises(CommandError, match="max_continuations must be an integer >= 0, got '2'"):
        cur.params.set(max_continuations="2")
    assert cur.settings.params == {}  # nothing refused was recorded


def test_params_and_adapters_reach_the_request(ctx, engine):
    cur = ctx.cursor()
    cur.params.set(temperature=0.3, max_new_tokens=7, stop=["END"])
    cur.adapters.set(["a"])
    cur.adapters.add("b")
    cur.ask("x")
    req = engine.requests[-1]
    assert (req.temperature, req.max_new_tokens, req.stop) == (0.3, 7, ("END",))
    assert req.adapters == ("a", "b")
    cur.params.set(temperature=None)
    cur.adapters.set([])
    cur.ask("y", top_k=3)
    req = engine.requests[-1]
    # unset: the engine's default (greedy unless do_sample), no longer a stored 1.0
    assert req.temperature is None and req.adapters == () and req.top_k == 3


def test_record_is_the_public_way_to_record_any_command_and_checks_it(ctx):
    cur = ctx.cursor()
    cur.ask("q")
    cur.record(Command(kind=CommandKind.PARAMS_SET, params={"temperature": 0.25, "stop": "X"}))
    assert cur.params.show() == {"temperature": 0.25, "stop": ["X"]}  # as params.set stores
    at = cur.node_id
    for bad in ({"temperature": "hot"}, {"warmth": 1}):
        with pytest.raises(CommandError):
            cur.record(Command(kind=CommandKind.PARAMS_SET, params=bad))
    with pytest.raises(CommandError):  # a raw append is checked the same way
        ctx.session.append(
            at,
            NodeKind.PLACEHOLDER,
            commands=[Command(kind=CommandKind.PARAMS_SET, params={"top_k": "5"})],
        )
    assert cur.node_id == at and not ctx.session.children(at)


def test_commands_after_a_turn_go_on_a_placeholder_not_the_turn(ctx):
    cur = ctx.cursor()
    cur.ask("x")
    reply = cur.node_id
    cur.system.set("S")
    cur.params.set(seed=1)
    assert cur.node.kind is NodeKind.PLACEHOLDER
    assert cur.node.parent_id == reply
    assert len(cur.node.commands) == 2  # both on the same placeholder
    assert ctx.session.node(reply).commands == ()


def test_fork_leaves_the_original_cursor_and_does_not_leak(ctx):
    cur = ctx.cursor()
    cur.ask("base")
    alt = cur.fork()
    alt.system.set("alt only")
    alt.ask("alt question")
    assert cur.system.show().mode is SystemMode.DEFAULT
    cur.ask("main question")
    assert contents(cur)[-2:] == [("user", "main question"), ("assistant", "echo: main question")]
    assert ("user", "alt question") not in contents(cur)
    assert contents(alt)[0] == ("system", "alt only")


def test_navigation(ctx):
    cur = ctx.cursor()
    cur.ask("a")
    first = cur.node_id
    cur.ask("b")
    cur.parent().parent()
    assert cur.node_id == first
    cur.leaf()
    assert cur.node.turn.text == "echo: b"
    cur.goto(first)
    other = cur.clone()
    other.ask("c")
    cur.child(0)
    user_b = cur.node_id
    cur.next_sibling()
    assert cur.node.turn.text == "c"
    cur.prev_sibling()
    assert cur.node_id == user_b
    with pytest.raises(CursorError):
        cur.root().parent()


def test_batch_members_run_together_and_return_one_cursor_per_prompt(ctx, engine):
    cur = ctx.cursor()
    cur.ask("start")
    before = cur.node_id
    kids = cur.batch(["p1", "p2", "p3"])
    assert cur.node_id == before
    assert [k.turn.text for k in kids] == ["echo: p1", "echo: p2", "echo: p3"]
    assert engine.max_in_flight == 3
    assert {k.turn.metrics.batch_size for k in kids} == {3}
    hub = ctx.session.node(kids[0].path()[-3].id)
    assert hub.kind is NodeKind.BATCH_HUB
    assert all(k.path()[-3].id == hub.id for k in kids)


def test_batch_member_cancelled_on_its_way_is_never_sent_and_the_others_run(ctx, engine):
    """A member whose REQUEST callback is still running is cancelled by id before it is
    sent; the other member goes on."""
    cur = ctx.cursor()
    release = asyncio.Event()
    request_ids: list[str] = []

    async def on_event(event):
        if event.kind is EventKind.REQUEST:
            request_ids.append(event.request_id)
            if len(request_ids) == 1:  # hold the first member on its way to the engine
                await release.wait()

    async def main():
        task = asyncio.ensure_future(cur.abatch(["p1", "p2"], on_event=on_event))
        while len(request_ids) < 2:
            await asyncio.sleep(0.001)
        assert ctx.cancel(request_ids[0])
        assert not ctx.cancel("no-such-request")
        release.set()
        return await task

    kids = asyncio.run(main())
    held, other = sorted(kids, key=lambda k: k.turn.request_id != request_ids[0])
    assert held.turn.cancelled and held.turn.finish_reason is FinishReason.CANCELLED
    assert held.turn.text == "" and held.turn.metrics.batch_size == 0  # it never ran
    assert other.turn.text in ("echo: p1", "echo: p2") and not other.turn.cancelled
    assert [r.id for r in engine.requests] == [request_ids[1]]
    assert not any(k.running for k in kids)


def test_cancel_all_cancels_every_running_request_of_the_scope(ctx, engine):
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()
    started: list[str] = []

    async def main():
        task = asyncio.ensure_future(
            cur.abatch(["a" * 20, "b" * 20, "c" * 20], on_event=lambda e: started.append(e.kind))
        )
        while started.count(EventKind.TEXT) < 3:
            await asyncio.sleep(0.005)
        assert ctx.with_scope("other").cancel_all() == 0  # another scope runs nothing
        assert ctx.cancel_all() == 3
        return await task

    kids = asyncio.run(main())
    assert all(k.turn.cancelled and k.turn.text for k in kids)
    assert ctx.cancel_all() == 0


def test_try_out_promote_moves_origin_and_marks_main_line(ctx):
    cur = ctx.cursor()
    cur.ask("q")
    t = cur.try_out()
    assert ctx.tryouts() == [t]
    t.ask("try this")
    cur.ask("meanwhile")
    origin = t.promote()
    assert origin is cur and cur.node_id == t.node_id
    assert ctx.tryouts() == []
    assert ctx.session.node(t.hub_id).main_line
    cur.parent().parent().parent()  # back above the hub
    assert cur.leaf().node_id == t.node_id  # leaf follows the main line
    with pytest.raises(CursorError, match="closed"):
        t.ask("again")


def test_try_out_close_archives(ctx):
    cur = ctx.cursor()
    cur.ask("q")
    start = cur.node_id
    t = cur.try_out()
    t.ask("bad idea")
    t.close()
    assert ctx.session.node(t.hub_id).archived
    assert cur.node_id == start
    assert cur.leaf().node_id == start  # archived branches are off the main line


def test_reopening_a_conversation_does_not_resume_inside_a_closed_try_out(tmp_path, engine):
    path = tmp_path / "s.db"
    session = Session.open(path)
    ctx = ChatContext(session, engine=engine)
    cur = ctx.cursor()
    cur.ask("keep this")
    origin, cid = cur.node_id, cur.conversation_id
    t = cur.try_out()
    t.ask("discard this")
    t.close()
    # As the REPL's /switch does: a new cursor on the conversation, in this scope and in a
    # scope that never saved a position (it starts from the newest node, in the try-out).
    assert ctx.cursor(cid).node_id == origin
    assert ctx.with_scope("viewer").cursor(cid).node_id == origin
    session.close()
    session = Session.open(path)  # a new process, as after a REPL restart
    ctx = ChatContext(session, engine=engine)
    again = ctx.cursor(cid)
    assert again.node_id == origin
    again.ask("next question")
    sent = [m["content"] for m in engine.requests[-1].messages]
    assert sent == ["keep this", "echo: keep this", "next question"]
    session.close()


def test_a_scope_without_a_position_does_not_resume_in_trimmed_turns(ctx):
    cur = ctx.cursor()
    cur.ask("one")
    cur.ask("two")
    cur.trim(1)
    assert ctx.session.conversation(cur.conversation_id).head_id != cur.node_id  # in the trim
    other = ctx.with_scope("viewer").cursor(cur.conversation_id)
    assert other.node_id == cur.node_id
    assert contents(other) == [("user", "one"), ("assistant", "echo: one")]


def test_scopes_do_not_touch_each_others_tryouts_or_positions(ctx):
    other = ctx.with_scope("plugin")
    a = ctx.cursor()
    a.ask("shared")
    b = other.cursor(a.conversation_id)
    assert b.node_id == a.node_id  # no position in scope "plugin" yet: the newest node
    ta = a.try_out()
    tb = b.try_out()
    assert ctx.tryouts() == [ta] and other.tryouts() == [tb]
    assert ctx.close_tryouts() == 1
    assert other.tryouts() == [tb] and not tb.closed
    tb.ask("plugin work")
    assert ctx.cursor(a.conversation_id).node_id == a.node_id
    assert other.cursor(a.conversation_id).node_id == tb.node_id


def test_retry_makes_a_sibling_reply_with_later_commands(ctx, engine):
    cur = ctx.cursor()
    engine.script("first answer")
    cur.ask("q")
    old = cur.node_id
    cur.params.set(temperature=0.9)
    engine.script("second answer")
    turn = cur.retry()
    assert turn.text == "second answer"
    assert engine.requests[-1].temperature == 0.9
    assert [m["content"] for m in engine.requests[-1].messages] == ["q"]
    user = ctx.session.node(old).parent_id
    assert ctx.session.path(cur.node_id)[-3].id == user
    assert {n.kind for n in ctx.session.children(user)} == {NodeKind.TURN, NodeKind.PLACEHOLDER}
    # As aretry's docstring says: the placeholder, not the new reply, is the old one's
    # sibling, so siblings() of the new reply do not reach the old one; its parent's do.
    assert [n.id for n in cur.siblings()] == [cur.node_id]
    assert cur.parent().prev_sibling().node_id == old


def test_retry_without_user_turn_is_an_error(ctx):
    with pytest.raises(CursorError, match="nothing to retry"):
        ctx.cursor().retry()


def test_continue_stitches_a_truncated_reply(ctx, engine):
    cur = ctx.cursor()
    engine.script(FakeReply(text="Once upon", finish_reason=FinishReason.LENGTH))
    turn = cur.ask("story")
    assert turn.truncated
    engine.script(" a time.")
    turn = cur.continue_()
    assert turn.text == "Once upon a time." and not turn.truncated
    assert engine.requests[-1].continue_final
    assert engine.requests[-1].messages[-1] == {"role": "assistant", "content": "Once upon"}
    assert contents(cur) == [("user", "story"), ("assistant", "Once upon a time.")]


def test_a_continued_reply_is_one_turn_and_one_message_built_the_same_way(ctx, engine):
    cur = ctx.cursor()
    cur.params.set(max_continuations=2)
    cut = FinishReason.LENGTH
    engine.script(
        FakeReply(text="", reasoning="think ", finish_reason=cut),  # nothing visible yet
        FakeReply(text="Once", reasoning="more", finish_reason=cut),
        FakeReply(text=" upon.", tool_calls=[ToolCall("ping", {}, id="c1")]),
    )
    cur.ask("story")  # then a tool round and the default reply
    replies = [n.id for n in cur.path() if n.turn and n.turn.role is Role.ASSISTANT]
    turn = ctx.cursor(at=replies[2]).turn  # the last continuation of the first reply
    assert (turn.text, turn.reasoning) == ("Once upon.", "think more")
    assert [c.name for c in turn.tool_calls] == ["ping"]
    reply = next(m for m in cur.messages() if m["role"] == "assistant")
    assert reply["content"] == turn.text
    assert [c["function"]["name"] for c in reply["tool_calls"]] == ["ping"]


def test_automatic_continuations_up_to_the_limit(ctx, engine):
    cur = ctx.cursor()
    cur.params.set(max_continuations=2)
    cut = FinishReason.LENGTH
    engine.script(
        FakeReply(text="a", finish_reason=cut),
        FakeReply(text="b", finish_reason=cut),
        FakeReply(text="c", finish_reason=cut),
    )
    turn = cur.ask("go")
    assert turn.text == "abc" and turn.truncated  # limit reached, still truncated
    assert len(engine.requests) == 3
    kinds = [(n.turn.continuation, n.turn.auto) for n in cur.path() if n.turn][1:]
    assert kinds == [(False, False), (True, True), (True, True)]


def test_continue_needs_an_assistant_reply(ctx):
    cur = ctx.cursor()
    with pytest.raises(CursorError, match="nothing to continue"):
        cur.continue_()


def test_trim_drops_user_turns_but_keeps_their_state(ctx):
    cur = ctx.cursor()
    cur.ask("one")
    cur.system.set("S")
    cur.ask("two")
    cur.params.set(seed=5)
    cur.ask("three")
    cur.trim(2)
    assert contents(cur) == [("system", "S"), ("user", "one"), ("assistant", "echo: one")]
    assert cur.params.show() == {"seed": 5}
    with pytest.raises(CursorError):
        cur.trim(5)


def test_engine_errors_are_recorded_not_raised(ctx, engine):
    cur = ctx.cursor()
    engine.script(FakeReply(error="CUDA out of memory"))
    turn = cur.ask("x")
    assert turn.error == "CUDA out of memory" and turn.finish_reason is FinishReason.ERROR
    engine.script(FakeReply(raise_exc=RuntimeError("boom")))
    turn = cur.ask("y")
    assert "boom" in turn.error
    assert cur.ask("z").text == "echo: z"  # the context goes on
    # failed replies are not sent to the model again
    assert ("assistant", "") not in contents(cur)


def test_no_engine_is_a_clear_error(session):
    cur = ChatContext(session).cursor()
    with pytest.raises(ContextError, match="no engine"):
        cur.ask("x")


def test_cancel_by_id_keeps_partial_text(ctx, engine):
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()

    async def main():
        task = asyncio.ensure_future(cur.aask("x" * 10))
        while engine.in_flight == 0 or not cur.running:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.03)
        assert cur.cancel()
        return await task

    turn = asyncio.run(main())
    assert turn.cancelled and turn.finish_reason is FinishReason.CANCELLED
    assert 0 < len(turn.text) < len("echo: " + "x" * 10)
    assert cur.node.turn.cancelled and cur.node.turn.text == turn.text
    assert not cur.running


def test_task_cancellation_records_a_cancelled_turn(ctx, engine):
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()
    seen = []

    async def main():
        task = asyncio.ensure_future(cur.aask("hello there", on_event=seen.append))
        while not any(e.text for e in seen):
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    node = cur.node
    assert node.turn.role is Role.ASSISTANT and node.turn.cancelled
    assert node.turn.text and "echo: hello there".startswith(node.turn.text)
    assert engine.cancelled  # the engine was told
    assert cur.ask("next").text == "echo: next"  # consistent tree, usable cursor


@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
def test_task_cancellation_without_events_keeps_the_partial_text(ctx, engine, how):
    """Without an event callback the reply is not streamed: a cancelled task used to record
    the reply with no text at all, though the engine had produced some."""
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()

    async def main():
        if how == "wait_for":
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(cur.aask("x" * 40), 0.15)
            return
        task = asyncio.ensure_future(cur.aask("x" * 40))
        await asyncio.sleep(0.15)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    turn = cur.node.turn
    assert turn.role is Role.ASSISTANT and turn.cancelled
    assert turn.finish_reason is FinishReason.CANCELLED
    assert 0 < len(turn.text) < len("echo: " + "x" * 40)
    assert ("echo: " + "x" * 40).startswith(turn.text)
    assert turn.metrics is not None and turn.metrics.completion_tokens > 0
    assert engine.cancelled and not cur.running
    assert cur.ask("next").text == "echo: next"


def test_a_cancel_before_the_request_task_starts_never_sends_it(ctx, engine):
    cur = ctx.cursor()

    async def main():
        task = asyncio.ensure_future(cur.aask("hi"))
        await asyncio.sleep(0)  # the exchange ran up to sending; the send is scheduled
        assert cur.running and not engine.requests
        assert cur.cancel()
        return await task

    turn = asyncio.run(main())
    assert turn.cancelled and turn.text == ""
    assert engine.requests == []  # cancelled on its way: never reached the engine


def test_cursor_runs_one_exchange_at_a_time(ctx, engine):
    engine.delay_s = 0.01
    cur = ctx.cursor()

    async def main():
        task = asyncio.ensure_future(cur.aask("slow"))
        await asyncio.sleep(0)
        with pytest.raises(CursorError, match="running"):
            await cur.aask("again")
        await task

    asyncio.run(main())


def test_sync_ask_inside_a_running_loop_does_not_deadlock(ctx):
    async def main():
        return ctx.cursor().ask("from a loop")

    assert asyncio.run(main()).text == "echo: from a loop"


def test_prompt_and_token_count_use_the_engine(ctx):
    cur = ctx.cursor()
    cur.system.set("S")
    cur.ask("hi")
    assert cur.prompt().startswith("<|im_start|>system\nS")
    assert cur.count_tokens() == FakeEngine().count_tokens(cur.prompt())


def test_the_next_request_to_a_message_is_previewed_without_recording_it(ctx):
    """request/prompt/count_tokens(message) show the reply to a message not yet sent,
    also on a new conversation, which has nothing to reply to without one."""
    cur = ctx.cursor()
    with pytest.raises(CursorError, match=r"nothing to reply to here yet.*cursor\.request\('hi'\)"):
        cur.request()
    with pytest.raises(CursorError, match="nothing to reply to"):
        cur.prompt()
    assert cur.request("hi").messages == ({"role": "user", "content": "hi"},)
    assert cur.prompt("hi", temperature=0.5).endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert cur.count_tokens("hi") == FakeEngine().count_tokens(cur.prompt("hi"))
    assert cur.path()[-1].turn is None  # nothing was recorded
    with pytest.raises(CursorError, match="a prompt is a string"):
        cur.request(5)
    cur.ask("hi")
    preview = cur.request("again")
    cur.ask("again")
    assert ctx.engine.requests[-1].messages == preview.messages  # what ask then sent
    assert preview.messages[-1] == {"role": "user", "content": "again"}


def test_log_and_api_calls_are_recorded_but_change_nothing(ctx):
    cur = ctx.cursor()
    settings = cur.settings
    cur.log("tried something")
    cur.record_call("engine.adapters.load", path="/x", name="a")
    assert cur.settings == settings
    kinds = [c.kind.value for c in cur.node.commands]
    assert kinds == ["log", "api_call"]
    assert cur.node.commands[1].data == {"path": "/x", "name": "a"}


def test_a_clone_does_not_see_commands_given_after_cloning(ctx):
    a = ctx.cursor()
    a.system.set("before")
    b = a.clone()
    a.system.set("after")
    c = a.with_params(temperature=0.2)
    a.params.set(seed=3)
    assert b.system.show().text == "before"
    assert a.system.show().text == "after"
    assert c.params.show() == {} and a.params.show() == {"seed": 3}


def test_parse_errors_of_the_engine_are_kept_on_the_turn(session):
    from mp13_engine import Response

    class Parsing(FakeEngine):
        async def agenerate(self, request):
            resp = await super().agenerate(request)
            return Response(id=resp.id, text=resp.text, parse_errors=["bad <tool_call> json"])

    cur = ChatContext(session, engine=Parsing()).cursor()
    turn = cur.ask("x")
    assert turn.parse_errors == ("bad <tool_call> json",)
    session.refresh()
    assert session.node(turn.node_id).turn.parse_errors == ("bad <tool_call> json",)


def test_adapter_names_follow_the_engine_rule_for_request_adapters(ctx, engine):
    cur = ctx.cursor()
    cur.adapters.set("solo")
    assert cur.adapters.show() == ("solo",)
    cur.adapters.add(["a", "solo", "b"])
    assert cur.adapters.show() == ("solo", "a", "b")
    for bad in ("", ["ok", ""], [3], b"bytes"):
        with pytest.raises(CommandError, match="adapters"):
            cur.adapters.set(bad)
    assert cur.adapters.show() == ("solo", "a", "b")  # nothing was recorded
    cur.ask("hi")
    assert engine.requests[-1].adapters == ("solo", "a", "b")


def test_a_failing_batch_member_raises_after_the_others_finish(ctx, engine):
    engine.delay_s = 0.005
    cur = ctx.cursor()

    def on_event(event):
        if event.kind is EventKind.USER and event.turn.text == "boom":
            raise ValueError("the callback failed")

    with pytest.raises(ValueError, match="callback failed"):
        cur.batch(["one", "boom", "three"], on_event=on_event)
    hub = cur.children()[-1]
    replies = [ctx.cursor(at=u.id).children() for u in ctx.session.children(hub.id)]
    texts = sorted(r[0].turn.text for r in replies if r)
    assert texts == ["echo: one", "echo: three"]  # finished, not cut off


def test_a_continuation_after_a_settings_change_is_still_one_reply(ctx, engine):
    cur = ctx.cursor()
    engine.script(FakeReply(text="Once upon", finish_reason=FinishReason.LENGTH))
    cur.ask("story")
    alt = cur.fork()
    alt.ask("another story")  # the reply has a child now, so ...
    cur.system.set("be brief")  # ... this command goes on a placeholder below it
    assert cur.node.kind is NodeKind.PLACEHOLDER
    engine.script(" a time.")
    assert cur.continue_().text == "Once upon a time."
    assert cur.turn.text == "Once upon a time."  # joined across the placeholder
    assert contents(cur)[1:] == [("user", "story"), ("assistant", "Once upon a time.")]
    roles = [t.role for t in cur.exchange()]  # the placeholder is no turn of the exchange
    assert roles == [Role.USER, Role.ASSISTANT, Role.ASSISTANT]
    assert repr(ctx) == "<ChatContext scope='default' session=':memory:'>"
    assert sorted(map(id, ctx.cursors())) == sorted([id(cur), id(alt)])


def test_navigation_and_continue_errors_say_what_to_do(ctx):
    cur = ctx.cursor()
    cur.ask("q")
    with pytest.raises(CursorError, match=r"^this node has no children; ask something"):
        cur.child()
    cur.parent()  # on the user turn: nothing to continue
    with pytest.raises(CursorError, match=r"^nothing to continue: the last turn here is not an"):
        cur.continue_()

    async def in_a_loop():  # the sync call runs on a helper thread: the error crosses back
        cur.continue_()

    with pytest.raises(CursorError, match=r"^nothing to continue"):
        asyncio.run(in_a_loop())
    with pytest.raises(ContextError, match=r"no toolbox on this context; pass ChatContext\("):
        cur.tools.view()


def test_closing_a_try_out_twice_is_harmless(ctx):
    cur = ctx.cursor()
    cur.ask("q")
    t = cur.try_out()
    t.ask("bad idea")
    t.close()
    t.close()
    assert ctx.tryouts() == [] and ctx.session.node(t.hub_id).archived
    assert cur.leaf().node_id == cur.node_id


def test_an_engine_that_breaks_its_protocol_gives_a_recorded_error(ctx, engine):
    cur = ctx.cursor()
    engine.script(FakeReply(finish_reason=FinishReason.ERROR))  # an error without a message
    turn = cur.ask("x")
    assert turn.error == "the engine reported an error without a message"

    class NoFinalChunk(FakeEngine):
        async def astream(self, request):
            yield Chunk(id=request.id, text="half a")

    broken = ChatContext(ctx.session, engine=NoFinalChunk())
    turn = broken.cursor().ask("y", on_event=lambda event: None)
    assert turn.finish_reason is FinishReason.ERROR and turn.text == "half a"
    assert turn.error == (
        "engine failed: RuntimeError: the engine's stream ended without a final chunk"
    )


def test_a_new_conversation_has_no_exchange_and_archived_branches_can_be_left_out(ctx):
    cur = ctx.cursor()
    assert cur.exchange() == []  # nothing asked yet: no user turn to start from
    cur.ask("first")
    first_user = cur.path()[-2]
    cur.parent()
    cur.parent()  # back at the root, ask again: a second branch
    root = cur.node
    cur.ask("second")
    session = ctx.session
    session.set_archived(first_user.id)
    kids = session.children(root.id)
    assert [k.turn.text for k in kids] == ["first", "second"]
    assert [k.archived for k in kids] == [True, False]
    assert [k.turn.text for k in session.children(root.id, archived=False)] == ["second"]


def test_closing_a_try_out_after_its_origin_went_to_another_conversation(ctx):
    cur = ctx.cursor()
    cur.ask("keep this")
    origin, cid = cur.node_id, cur.conversation_id
    t = cur.try_out()
    t.ask("discard this")
    other = ctx.cursor()
    other.ask("elsewhere")
    cur.goto(other.node_id)  # the origin moves on before the try-out is closed
    t.close()
    assert ctx.session.node(t.hub_id).archived
    assert cur.node_id == other.node_id  # closing does not pull the origin back
    again = ctx.cursor(cid)  # the first conversation resumes where the origin left it
    assert again.node_id == origin
    assert contents(again) == [("user", "keep this"), ("assistant", "echo: keep this")]


def test_a_running_cursor_names_the_refused_call_and_a_way_that_works(ctx, engine):
    """The refusal used to advise "or fork() first", fork() included: advice that named the
    very call that had just failed. It names the call and a cursor where the running one
    started, which can fork and ask while the reply runs."""
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()
    cur.ask("first")
    start = cur.node_id

    async def main():
        task = asyncio.ensure_future(cur.aask("slow " * 5))
        while not cur.running or engine.in_flight == 0:
            await asyncio.sleep(0.005)
        for call, name in [
            (cur.fork, "fork()"),
            (cur.parent, "parent()"),
            (lambda: cur.trim(1), "trim()"),
            (cur.try_out, "try_out()"),
        ]:
            with pytest.raises(CursorError) as err:
                call()
            text = str(err.value)
            assert text.startswith(f"{name} is refused while this cursor is running")
            assert f"ctx.cursor(at={start!r})" in text and "fork() first" not in text
        with pytest.raises(CursorError, match=r"^ask\(\) is refused"):
            await cur.aask("again")
        with pytest.raises(CursorError, match=r"^retry\(\) is refused"):
            await cur.aretry()
        # The advice works while the reply is still running, both ways.
        beside = ctx.cursor(at=start).fork("meanwhile")
        twin = cur.clone()
        assert cur.running and twin.node_id == start != cur.node_id
        side = await beside.aask("side")
        other = await twin.aask("other")
        return await task, side, beside, other, twin

    turn, side, beside, other, twin = asyncio.run(main())
    assert turn.text == "echo: " + "slow " * 5 and side.text == "echo: side"
    assert [n.turn.text for n in cur.path() if n.turn][-2:] == ["slow " * 5, turn.text]
    assert [n.turn.text for n in beside.path() if n.turn][-2:] == ["side", "echo: side"]
    hub = next(n for n in beside.path() if n.kind is NodeKind.FORK_HUB)
    assert hub.parent_id == start and hub.label == "meanwhile"
    # The clone was not left at the user turn awaiting its reply: no two user turns in a row.
    assert other.text == "echo: other"
    assert [m["role"] for m in twin.messages()] == ["user", "assistant"] * 2
    assert twin.path()[-3].id == start


def test_promote_while_the_origin_runs_is_refused_and_works_after(ctx, engine):
    """promote() while the origin cursor ran an exchange moved it onto the try-out, and the
    running exchange, when it recorded its reply, moved it back: the promote was undone
    (the branch on the main line, the origin elsewhere). It is refused, naming a way that
    works, and that way works."""
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ctx.cursor()
    cur.ask("q")
    t = cur.try_out()
    t.ask("try this")

    async def main():
        task = asyncio.ensure_future(cur.aask("slow " * 5))
        while not cur.running or engine.in_flight == 0:
            await asyncio.sleep(0.005)
        with pytest.raises(CursorError) as err:
            t.promote()
        assert str(err.value).startswith("promote() is refused while the cursor this try-out")
        assert "await that exchange or cancel() it first" in str(err.value)
        assert not t.closed and ctx.tryouts() == [t]
        return await task

    asyncio.run(main())
    assert t.promote() is cur and cur.node_id == t.node_id
    assert ctx.session.node(t.hub_id).main_line
    assert [n.turn.text for n in cur.path() if n.turn][-2:] == ["try this", "echo: try this"]
