# SPDX-License-Identifier: MIT
"""Saved and imported conversations cannot widen the operator's tool permissions.

A ``tools.set {"*": "advertised"}`` command inside session data (a document
someone sends, or a conversation saved earlier) must not run a tool the operator's
toolbox disables, advertise one it keeps silent, or skip an approval, neither
when the conversation is continued nor when it is replayed (issue 11, item 1).
"""

from __future__ import annotations

import json

import pytest

from mp13_context import ChatContext, Role, Session, replay
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall, ToolsScope


class Operator:
    """The operator's toolbox: ``wipe_disk`` disabled, ``shell`` silent, ``mail`` asks."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.asked: list[str] = []
        self.tb = Toolbox()
        self.tb.register(self.tool("add"), name="add")
        self.tb.register(self.tool("wipe_disk"), name="wipe_disk", mode="disabled")
        self.tb.register(self.tool("shell"), name="shell", mode="silent")
        self.tb.register(self.tool("mail"), name="mail", approval="ask")

    def tool(self, name: str):
        def run() -> str:
            self.ran.append(name)
            return f"{name} ran"

        return run

    def approve(self, request) -> str:
        self.asked.append(request.call.name)
        return "no"


def responder(request):
    """Asks for every tool when the user says 'go'; then answers."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return FakeReply(text="done")
    if last["content"] == "go":
        calls = [ToolCall(n) for n in ("wipe_disk", "shell", "mail", "add")]
        return FakeReply(tool_calls=calls)
    return FakeReply(text="hi")


def permissive_conversation(session: Session) -> str:
    """A conversation whose data says every tool is advertised, made with a toolbox
    that allowed everything (as a foreign document or an old save would be)."""
    tb = Toolbox()
    for name in ("add", "wipe_disk", "shell", "mail"):
        tb.register(lambda: "ok", name=name)
    cur = ChatContext(session, engine=FakeEngine(responder=responder), toolbox=tb).cursor()
    cur.tools.set(ToolsScope({"*": "advertised"}))
    cur.ask("hello")
    cur.tools.add(ToolsScope({"wipe_disk": "advertised", "shell": "advertised"}))
    return cur.conversation_id


def assert_ceiling_held(op: Operator, engine: FakeEngine, session: Session, leaf: str) -> None:
    advertised = {t["function"]["name"] for t in engine.requests[-2].tools or ()}
    assert advertised == {"add", "mail"}  # neither the disabled nor the silent tool
    tool_turn = next(
        n.turn for n in reversed(session.path(leaf)) if n.turn and n.turn.role is Role.TOOL
    )
    results = {r.name: r for r in tool_turn.tool_results}
    assert results["wipe_disk"].is_error and "disabled" in results["wipe_disk"].content
    assert results["mail"].is_error and "declined" in results["mail"].content
    assert results["shell"].content == "shell ran"  # silent: runs, was not advertised
    assert results["add"].content == "add ran"
    assert sorted(op.ran) == ["add", "shell"]
    assert op.asked == ["mail"]


@pytest.fixture
def imported(tmp_path):
    src = Session.open(":memory:")
    cid = permissive_conversation(src)
    path = tmp_path / "doc.json"
    src.export_json(path)
    src.close()
    # The document as someone would send it: nothing in it may count.
    assert '"*": "advertised"' in json.dumps(json.loads(path.read_text()))
    session = Session.import_json(path)
    yield session, cid
    session.close()


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "chats.db"
    first = Session.open(path)
    cid = permissive_conversation(first)
    first.close()
    session = Session.open(path)
    yield session, cid
    session.close()


@pytest.mark.parametrize("source", ["imported", "saved"])
def test_continuing_cannot_widen_the_operators_toolbox(source, request):
    session, cid = request.getfixturevalue(source)
    op, engine = Operator(), FakeEngine(responder=responder)
    ctx = ChatContext(session, engine=engine, toolbox=op.tb, approval=op.approve)
    cur = ctx.cursor(cid)
    assert cur.tools.view().to_dict() == op.tb.view().to_dict()
    cur.ask("go")
    assert_ceiling_held(op, engine, session, cur.node_id)


@pytest.mark.parametrize("source", ["imported", "saved"])
def test_replaying_cannot_widen_the_operators_toolbox(source, request):
    session, cid = request.getfixturevalue(source)
    cur = ChatContext(session, engine=FakeEngine(responder=responder)).cursor(cid)
    cur.ask("go")  # the source now has a tool round under its permissive scopes
    op, engine = Operator(), FakeEngine(responder=responder)
    report = replay(
        cid, session=session, engine=engine, toolbox=op.tb, approval=op.approve, into=session
    )
    assert [t.user_text for t in report.turns] == ["hello", "go"]
    assert_ceiling_held(op, engine, session, report.leaf_node_id)
