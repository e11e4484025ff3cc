# SPDX-License-Identifier: MIT
"""The runner when recording fails: a typed error, and nothing half-recorded.

A SQLite trigger added by a second connection makes the store refuse some inserts,
the way a full disk or a locked file would, through the real store path.
"""

from __future__ import annotations

import pytest
import sqlean

from mp13_context import (
    ChatContext,
    EventKind,
    ReadOnlyError,
    Role,
    Session,
    StoreError,
)
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def refuse_inserts(path, role: str) -> None:
    """Make every later insert of a ``role`` turn fail, as a full disk would."""
    conn = sqlean.connect(str(path))
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON nodes "
        f'WHEN NEW.turn LIKE \'{{"role":"{role}"%\' '
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    conn.commit()
    conn.close()


def allow_inserts(path) -> None:
    conn = sqlean.connect(str(path))
    conn.execute("DROP TRIGGER refuse")
    conn.commit()
    conn.close()


def turns_of(session, conversation_id):
    return [n.turn for n in session.conversation_nodes(conversation_id) if n.turn]


def test_a_reply_with_tool_calls_is_recorded_with_its_results_or_not_at_all(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    engine = FakeEngine([FakeReply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})])])
    toolbox = Toolbox()
    toolbox.register(add)
    ctx = ChatContext(session, engine=engine, toolbox=toolbox)
    cur = ctx.cursor()
    events = []
    refuse_inserts(path, "tool")
    with pytest.raises(StoreError) as failed:
        cur.ask("what is 2+3?", on_event=events.append)
    # Neither the reply with the call nor its result: no call without a result.
    assert [t.role for t in turns_of(session, cur.conversation_id)] == [Role.USER]
    assert "nothing of it was recorded" in str(failed.value)
    assert cur.node.turn.role is Role.USER and not cur.running
    assert [e.kind for e in events if e.kind is EventKind.TURN] == []
    assert EventKind.TOOL_RESULT in [e.kind for e in events]  # the tool did run
    assert session.verify().ok
    allow_inserts(path)
    engine.script(FakeReply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})]), "5")
    assert cur.retry().text == "5"
    roles = [m["role"] for m in cur.messages()]
    assert roles == ["user", "assistant", "tool", "assistant"]
    session.close()


def test_a_reply_that_cannot_be_recorded_raises_and_the_cursor_stays(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    ctx = ChatContext(session, engine=FakeEngine())
    cur = ctx.cursor()
    cur.ask("first")
    before = cur.node_id
    refuse_inserts(path, "assistant")
    with pytest.raises(StoreError, match="nothing of it was recorded") as failed:
        cur.ask("second")
    assert f"stays at node {cur.node_id}" in str(failed.value)
    assert [t.text for t in turns_of(session, cur.conversation_id)] == [
        "first",
        "echo: first",
        "second",
    ]
    assert cur.node.parent_id == before and cur.node.turn.text == "second"
    allow_inserts(path)
    assert cur.retry().text == "echo: second"
    session.close()


def test_a_read_only_session_refuses_replies_before_the_engine_runs(tmp_path):
    path = tmp_path / "s.db"
    with Session.open(path) as writer:
        cur = ChatContext(writer, engine=FakeEngine()).cursor()
        cur.ask("hello")
        leaf = cur.node_id
    engine = FakeEngine()
    with Session.open(path, read_only=True) as session:
        cur = ChatContext(session, engine=engine).cursor(at=leaf)
        for attempt in (cur.retry, cur.continue_, lambda: cur.ask("more")):
            with pytest.raises(ReadOnlyError, match="read_only"):
                attempt()
        with pytest.raises(ReadOnlyError, match="read_only"):
            cur.batch(["a", "b"])
        assert engine.requests == []
        assert cur.node_id == leaf and not cur.running


def test_a_session_closed_while_a_reply_runs_says_to_open_it_again(tmp_path):
    """Not "make room on the disk": nothing is wrong with the disk."""
    path = tmp_path / "s.db"
    session = Session.open(path)
    cur = ChatContext(session, engine=FakeEngine()).cursor()

    def close_on_text(event):
        if event.kind is EventKind.TEXT:
            session.close()

    with pytest.raises(StoreError) as failed:
        cur.ask("hello", on_event=close_on_text)
    assert str(failed.value).endswith(
        ": open the session again with Session.open(path), then try again"
    )
    assert "make room" not in str(failed.value)
    assert not cur.running
    with Session.open(path) as again:  # the user turn was kept
        (conv,) = again.conversations()
        assert [t.text for t in turns_of(again, conv.id)] == ["hello"]
