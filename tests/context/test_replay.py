# SPDX-License-Identifier: MIT
"""Replay: user turns and replayable commands re-run; automatic turns regenerated; report."""

from __future__ import annotations

import asyncio
import difflib
import random

import pytest

from mp13_context import ChatContext, CommandKind, ContextError, Role, Session, areplay, replay
from mp13_context._replay import similarity
from mp13_context.testing import FakeEngine, FakeReply, echo
from mp13_engine import FinishReason
from mp13_toolbox import Toolbox, ToolCall


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def wipe_disk(path: str) -> str:
    """Delete everything under a path.

    Args:
        path: where
    """
    return f"wiped {path}"


def responder(request):
    """Deterministic: 'calc' asks for a tool, a tool result is reported, long replies cut."""
    last = request.messages[-1]
    if request.continue_final:
        return FakeReply(text=" and the end.")
    if last["role"] == "tool":
        return FakeReply(text=f"the tool said {last['content']}")
    if last["content"].startswith("calc"):
        return FakeReply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})])
    if last["content"].startswith("wipe"):
        return FakeReply(tool_calls=[ToolCall("wipe_disk", {"path": "/tmp"})])
    if last["content"].startswith("long"):
        return FakeReply(text="a long story", finish_reason=FinishReason.LENGTH)
    return echo(request)


def toolbox():
    tb = Toolbox()
    tb.register(add)
    tb.register(wipe_disk, risk="high")
    return tb


def source_conversation(session, tb=None):
    ctx = ChatContext(session, engine=FakeEngine(responder=responder), toolbox=tb or toolbox())
    cur = ctx.cursor(title="source")
    cur.system.set("be exact")
    cur.params.set(temperature=0.0)
    cur.ask("hello")
    cur.log("a note for people")
    cur.record_call("engine.adapters.load", path="/a")
    cur.adapters.set(["lora"])
    cur.ask("calc 2+3")
    cur.ask("long tale")
    cur.continue_()
    cur.system.add("second paragraph")
    return cur


def test_replay_into_the_same_engine_reproduces_everything(session):
    cur = source_conversation(session)
    report = replay(cur, engine=FakeEngine(responder=responder), toolbox=toolbox())
    assert report.all_equal and report.mean_similarity == 1.0
    assert [t.user_text for t in report.turns] == ["hello", "calc 2+3", "long tale"]
    assert report.turns[1].original_tool_calls[0].name == "add"
    assert report.turns[2].replayed_text == "a long story and the end."
    assert report.conversation_id != cur.conversation_id
    new = ChatContext(session).cursor(at=report.leaf_node_id)

    def shape(messages):
        return [(m["role"], m["content"]) for m in messages]

    assert shape(new.messages()) == shape(cur.messages())
    assert new.settings.adapters == ("lora",) and new.settings.params == {"temperature": 0.0}
    assert new.settings.system.text == "be exact\n\nsecond paragraph"


def test_log_notes_and_api_calls_are_not_replayed(session):
    cur = source_conversation(session)
    report = replay(cur, engine=FakeEngine(responder=responder), toolbox=toolbox())
    kinds = {c.kind for n in session.path(report.leaf_node_id) for c in n.commands}
    assert CommandKind.LOG not in kinds and CommandKind.API_CALL not in kinds
    assert CommandKind.SYSTEM_ADD in kinds and CommandKind.ADAPTERS_SET in kinds


def test_automatic_turns_are_regenerated_not_copied(session):
    cur = source_conversation(session)
    other = Toolbox()

    def add_wrong(a: int, b: int) -> int:
        """Add, badly.

        Args:
            a: first
            b: second
        """
        return a + b + 1

    other.register(add_wrong, name="add")
    report = replay(cur, engine=FakeEngine(responder=responder), toolbox=other)
    calc = report.turns[1]
    assert calc.tool_calls_equal  # the model asked for the same call
    assert calc.original_text == "the tool said 5" and calc.replayed_text == "the tool said 6"
    assert not calc.text_equal and 0.5 < calc.similarity < 1.0
    assert not report.all_equal and report.equal_count == 2


def test_a_different_engine_is_compared_turn_by_turn(tmp_path):
    src = Session.open(tmp_path / "a.db")
    cur = source_conversation(src)
    dst = Session.open(tmp_path / "b.db")

    def shouty(request):
        reply = responder(request)
        return FakeReply(
            text=reply.text.upper(), tool_calls=reply.tool_calls, finish_reason=reply.finish_reason
        )

    report = replay(cur, into=dst, engine=FakeEngine(responder=shouty), toolbox=toolbox())
    assert [t.text_equal for t in report.turns] == [False, False, False]
    assert all(t.original_metrics and t.replayed_metrics for t in report.turns)
    assert dst.conversation(report.conversation_id).title == "replay of source"
    assert src.conversations()[0].id == cur.conversation_id and len(src.conversations()) == 1


def test_permissions_are_not_replayed(session):
    tb = toolbox()
    tb.remember("wipe_disk", "always")  # the source run was allowed to wipe
    ctx = ChatContext(session, engine=FakeEngine(responder=responder), toolbox=tb)
    cur = ctx.cursor()
    cur.ask("wipe it")
    assert cur.exchange()[2].tool_results[0].content == "wiped /tmp"
    report = replay(cur, engine=FakeEngine(responder=responder), toolbox=toolbox())
    new = ChatContext(session).cursor(at=report.leaf_node_id)
    result = next(t for t in new.exchange() if t.role is Role.TOOL).tool_results[0]
    assert result.is_error and "wiped" not in result.content


def test_replay_a_conversation_by_id_follows_the_main_line(session):
    cur = source_conversation(session)
    side = cur.fork()
    side.ask("a side branch")
    report = replay(
        cur.conversation_id,
        session=session,
        engine=FakeEngine(responder=responder),
        toolbox=toolbox(),
    )
    assert "a side branch" in [t.user_text for t in report.turns]  # newest branch = main line
    info = session.conversation(cur.conversation_id)
    again = replay(info, into=session, engine=FakeEngine(responder=responder), toolbox=toolbox())
    assert [t.user_text for t in again.turns] == [t.user_text for t in report.turns]
    with pytest.raises(ContextError, match="needs the session"):
        replay(cur.conversation_id, engine=FakeEngine())


def test_replay_refuses_without_its_source_session_or_an_engine(tmp_path, session):
    cur = source_conversation(session)
    other = Session.open(tmp_path / "other.db")
    with pytest.raises(ContextError) as err:  # the id is not in `into` either
        replay(cur.conversation_id, into=other, engine=FakeEngine())
    assert str(err.value) == (
        f"replay of conversation {cur.conversation_id} needs the session it is in: "
        f"{cur.conversation_id!r} is not a conversation of into; check the id, or "
        "replay(conv, session=source_session, into=..., engine=...), "
        "or replay a cursor of it: replay(cur, into=..., engine=...)"
    )
    with pytest.raises(ContextError, match="'nope' is not a conversation of into; check the id"):
        replay("nope", into=session, engine=FakeEngine())  # a mistyped id, one session
    no_engine = ChatContext(session).cursor(cur.conversation_id)
    with pytest.raises(
        ContextError, match=r"^replay needs an engine: replay\(source, engine=\.\.\.\)$"
    ):
        replay(no_engine)
    assert other.conversations() == []
    other.close()


def test_a_reply_that_now_ends_on_its_own_is_not_continued(session):
    cur = source_conversation(session)  # "long tale" was cut and continued once

    def complete(request):
        reply = responder(request)
        return FakeReply(text=reply.text, tool_calls=reply.tool_calls)  # never cut

    engine = FakeEngine(responder=complete)
    report = replay(cur, engine=engine, toolbox=toolbox())
    long_turn = report.turns[-1]
    assert long_turn.original_text == "a long story and the end."
    assert long_turn.replayed_text == "a long story"
    assert not any(r.continue_final for r in engine.requests)


def test_the_documented_replays_into_another_session(tmp_path, session):
    """API.md's two forms: a cursor (its session is known), or a conversation with the
    session it is in; the new conversation lands in ``into`` and the source is unchanged."""
    cur = source_conversation(session)
    before = session.conversation_nodes(cur.conversation_id)
    with Session.open(tmp_path / "other.db") as other:
        ChatContext(other, engine=FakeEngine()).cursor(title="already here").ask("old turn")
        by_cursor = replay(cur, into=other, engine=FakeEngine(responder=responder))
        info = session.conversation(cur.conversation_id)
        by_info = replay(info, session=session, into=other, engine=FakeEngine(responder=responder))
        assert [t.user_text for t in by_cursor.turns] == ["hello", "calc 2+3", "long tale"]
        assert [t.user_text for t in by_info.turns] == [t.user_text for t in by_cursor.turns]
        titles = sorted(c.title for c in other.conversations())
        assert titles == ["already here", "replay of source", "replay of source"]
        assert by_info.conversation_id != by_cursor.conversation_id
        with pytest.raises(ContextError) as err:  # a header alone does not name its session
            replay(info, into=other, engine=FakeEngine())
        assert str(err.value) == (
            f"replay of conversation {info.id} needs the session it is in: a ConversationInfo "
            "does not carry it; pass it, replay(conv, session=source_session, into=..., "
            "engine=...), or replay a cursor of it: replay(cur, into=..., engine=...)"
        )
        assert len(other.conversations()) == 3  # the refusal added nothing
    assert session.conversation_nodes(cur.conversation_id) == before
    assert [c.id for c in session.conversations()] == [cur.conversation_id]


@pytest.mark.parametrize("name", ["into", "session"])
def test_a_session_given_as_a_path_is_refused_by_name(session, tmp_path, name):
    cur = source_conversation(session)
    path = str(tmp_path / "other.db")
    with pytest.raises(ContextError) as err:
        replay(cur.conversation_id, engine=FakeEngine(), **{name: path})
    assert str(err.value) == (
        f"replay's {name}= takes a Session, not str; open it with Session.open(path)"
    )
    assert not (tmp_path / "other.db").exists()
    assert [c.id for c in session.conversations()] == [cur.conversation_id]


def _words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    vocab = ["alpha", "beta", "gamma", "café", "日本語", "🙂", "x"]
    words = [rng.choice(vocab) for _ in range(n)]
    return "\n".join(" ".join(words[i : i + 12]) for i in range(0, n, 12))


def test_similarity_of_short_texts_is_difflibs_exact_ratio():
    a, b = "the tool said 5", "the tool said 6"
    assert similarity(a, b) == difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    assert similarity("", "") == 1.0 and similarity("abc", "") == 0.0


def test_similarity_of_long_replies_stays_meaningful():
    # Character-level difflib on two 100 kB replies runs for many minutes (a replay of
    # a long answer seemed to hang); long texts are compared word by word instead.
    long = _words(25_000, 1)
    assert len(long) > 100_000
    assert similarity(long, long) == 1.0
    middle = len(long) // 2
    edited = long[:middle] + "INSERTED " + long[middle:]
    assert 0.99 < similarity(long, edited) < 1.0
    # Two edits far apart: the text between them is matched line by line, and the
    # changed lines word by word.
    twice = "X" + edited[1:-1] + "Y"
    assert 0.99 < similarity(long, twice) < 1.0
    lines = long.split("\n")
    lines[100] = lines[100].replace(" ", "  ", 1)
    lines[-100] = lines[-100][::-1]
    assert 0.99 < similarity(long, "\n".join(lines)) < 1.0
    other = _words(25_000, 2)
    assert similarity(long, other) < similarity(long, twice)
    assert 0.0 <= similarity(long, "short") < 0.01


def test_replay_reports_turn_i_of_n_as_each_user_turn_starts_and_ends(session):
    """A long replay used to say nothing until it was over."""
    cur = source_conversation(session)
    seen = []
    report = replay(
        cur, engine=FakeEngine(responder=responder), toolbox=toolbox(), progress=seen.append
    )
    assert [(p.index, p.total, p.done, p.turn is not None) for p in seen] == [
        (1, 3, 0, False),
        (1, 3, 1, True),
        (2, 3, 1, False),
        (2, 3, 2, True),
        (3, 3, 2, False),
        (3, 3, 3, True),
    ]
    assert [p.turn for p in seen if p.turn is not None] == list(report.turns)
    assert [p.user_text for p in seen[::2]] == ["hello", "calc 2+3", "long tale"]
    assert seen[0].message == "turn 1 of 3: hello"
    assert seen[1].message == "turn 1 of 3 done: same"
    assert str(seen[2]) == "turn 2 of 3: calc 2+3"  # progress=print prints the line


def test_replay_progress_may_be_async_and_says_how_a_turn_differs(session):
    cur = source_conversation(session)
    seen = []

    async def note(p):
        seen.append(p.message)

    other = FakeEngine(responder=lambda r: FakeReply(text="something else"))
    report = asyncio.run(areplay(cur, engine=other, toolbox=toolbox(), progress=note))
    assert len(seen) == 6 and not report.all_equal
    ratio = report.turns[0].similarity
    assert seen[1] == f"turn 1 of 3 done: differs (similarity {ratio:.2f})"


def test_replay_progress_that_is_not_a_function_is_refused_before_anything_runs(session):
    cur = source_conversation(session)
    engine = FakeEngine(responder=responder)
    before = len(session.conversations())
    with pytest.raises(ContextError, match="replay's progress is a function"):
        replay(cur, engine=engine, progress="print")
    assert engine.requests == [] and len(session.conversations()) == before


def test_replay_of_a_running_cursor_is_refused_and_its_clone_replays(session):
    """replay(cur) on a running cursor replayed its branch up to a reply still being recorded
    (a half-recorded node). It is refused, naming a way that works: its clone, where the
    exchange started, replays the branch up to there."""
    from mp13_context import CursorError

    engine = FakeEngine(responder=responder)
    engine.delay_s = 0.01
    engine.chunk_size = 1
    cur = ChatContext(session, engine=engine, toolbox=toolbox()).cursor()
    cur.ask("first")

    async def main():
        task = asyncio.ensure_future(cur.aask("slow " * 5))
        while not cur.running or engine.in_flight == 0:
            await asyncio.sleep(0.005)
        with pytest.raises(CursorError) as err:
            await areplay(cur, engine=FakeEngine(responder=responder), toolbox=toolbox())
        assert str(err.value).startswith("replay(cur) is refused while this cursor is running")
        assert "replay(cur.clone(), ...)" in str(err.value)
        report = await areplay(cur.clone(), engine=FakeEngine(responder=responder))
        await task
        return report

    report = asyncio.run(main())
    assert [t.user_text for t in report.turns] == ["first"]
    assert report.turns[0].text_equal
