# SPDX-License-Identifier: MIT
"""Through the turn runner, a tool's failure is a result and the turn goes on (issue 11.9).

A tool raising ``SystemExit``, ``GeneratorExit`` or its own ``CancelledError`` must
not end the turn or leave a call without a result in the tree; the model reads the
error and answers. Only the cancellation of the caller's task ends the turn.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from mp13_context import ChatContext, Role, SchemaError, Session
from mp13_context import _migrations as migrations
from mp13_context._convert import unstructure
from mp13_context._export import session_data
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


# --- a failing tool's traceback: recorded, stored, exported; never sent to the model ----------


def _root_of(n: int) -> int:
    raise ValueError(f"no square root of {n}")


def sqrt(n: int) -> int:
    """A square root that fails inside a helper.

    Args:
        n: the number
    """
    return _root_of(n)


def _failing_exchange(session, stream=False):
    tb = Toolbox()
    tb.register(sqrt)
    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("sqrt", {"n": -4}, id="c1")]), "cannot")
    cur = ChatContext(session, engine=engine, toolbox=tb).cursor()
    events = []
    cur.ask("root of -4?", on_event=events.append if stream else None)
    return cur, engine, events


def _tool_result(cur):
    (result,) = next(t for t in cur.exchange() if t.role is Role.TOOL).tool_results
    return result


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_tools_traceback_is_recorded_and_the_model_sees_only_the_error(session, stream):
    cur, engine, events = _failing_exchange(session, stream)
    result = _tool_result(cur)
    assert result.traceback is not None
    assert "in sqrt" in result.traceback and "in _root_of" in result.traceback
    assert result.traceback.rstrip().endswith("ValueError: no square root of -4")
    if stream:  # the event a UI shows carries it too
        (shown,) = [e.tool_result for e in events if e.tool_result is not None]
        assert shown == result
    # The model's next request holds the error text exactly as before, and no traceback.
    request = engine.requests[1]
    assert request.messages[-1] == {
        "role": "tool",
        "name": "sqrt",
        "content": "Tool 'sqrt' failed: ValueError: no square root of -4",
        "tool_call_id": "c1",
    }
    assert "Traceback" not in json.dumps(request.messages)
    assert "Traceback" not in engine.format_prompt(request)


def test_a_tool_traceback_survives_reopening_the_store_and_verifies(tmp_path):
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        cur, _, _ = _failing_exchange(session)
        recorded = _tool_result(cur)
        node_id = next(t for t in cur.exchange() if t.role is Role.TOOL).node_id
    with Session.open(path) as again:
        node = again.node(node_id)
        assert node.turn is not None
        assert node.turn.tool_results == (recorded,)
        assert node.turn.tool_results[0].traceback == recorded.traceback
        assert again.verify().ok


def test_a_tool_traceback_survives_export_and_import(session, tmp_path):
    cur, _, _ = _failing_exchange(session)
    recorded = _tool_result(cur)
    out = tmp_path / "export.json"
    session.export_json(out)
    doc = json.loads(out.read_text())
    assert doc["version"] == 4
    with Session.import_json(out) as copy:
        report_nodes = [
            n
            for c in copy.conversations()
            for n in copy.conversation_nodes(c.id)
            if n.turn is not None and n.turn.role is Role.TOOL
        ]
        (node,) = report_nodes
        assert node.turn.tool_results == (recorded,)
        assert copy.verify().ok


def test_an_export_of_a_session_without_tool_failures_reads_as_version_3_did(session):
    """A result without a traceback is stored and exported without the key: older
    rows and hashes are unchanged, and a version 3 document imports verified."""
    tb = Toolbox()
    tb.register(add)
    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]), "3")
    ChatContext(session, engine=engine, toolbox=tb).cursor().ask("1+2?")
    doc = json.loads(json.dumps(unstructure(session_data(session))))
    text = json.dumps(doc)
    assert "traceback" not in text
    doc["version"] = 3
    with Session.open(":memory:") as other:
        report = other.import_document(doc)
        assert report.verified and not report.edited


def test_an_older_mp13_refuses_a_store_that_may_hold_tracebacks(tmp_path, monkeypatch):
    """The file records the migration that allows tracebacks; a version that does not
    know it refuses the file instead of dropping them (see ``_m0006_tool_tracebacks``)."""
    path = tmp_path / "s.db"
    Session.open(path).close()
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]
        assert names == [n for n, _ in migrations.MIGRATIONS]
        assert names[-1] == "0006_tool_tracebacks"
        # The mp13 before it: the same list without that step.
        monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])
        with pytest.raises(SchemaError, match="0006_tool_tracebacks"):
            migrations.missing_migrations(conn)
    finally:
        conn.close()
