# SPDX-License-Identifier: MIT
"""Writing an export: a file that exists is kept unless the caller asks to replace it; and
random sessions come back the same, reopened and exported then imported."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_context import (
    ChatContext,
    CommandError,
    ContextError,
    SavedPosition,
    SerializationError,
    Session,
    StoreError,
)
from mp13_context._export import session_data
from mp13_context._migrations import MIGRATIONS
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall
from tests.context._trees import old_session_file, ops, play, snapshot


def test_an_export_never_overwrites_a_file_unless_asked(ctx, session, tmp_path):
    ctx.cursor().ask("first words")
    out = tmp_path / "out.json"
    out.write_text("the user's own notes")
    with pytest.raises(SerializationError) as err:
        session.export_json(out)
    assert str(err.value) == (
        f"{str(out)!r} exists; an export never overwrites a file: pick a new file name, or "
        "pass overwrite=True to replace it (the session itself is unchanged)"
    )
    assert out.read_text() == "the user's own notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left
    session.export_json(out, overwrite=True)
    with Session.import_json(out) as copy:
        assert {h.snippet for h in copy.search("first")} == {"[first] words", "echo: [first] words"}


def test_the_same_export_twice_is_refused_the_second_time(ctx, session, tmp_path):
    """As ``save_copy``: the second export to one name keeps the first."""
    ctx.cursor().ask("one")
    out = tmp_path / "out.json"
    session.export_json(out)
    first = out.read_text()
    ctx.cursor().ask("two")
    with pytest.raises(SerializationError, match="exists; an export never overwrites"):
        session.export_json(out)
    assert out.read_text() == first
    with pytest.raises(StoreError, match="exists; a copy never overwrites"):
        session.save_copy(tmp_path / "out.json")  # the copy refuses alike
    session.export_json(out, overwrite=True)
    assert len(json.loads(out.read_text())["conversations"]) == 2


def test_a_dangling_link_is_a_name_taken(session, tmp_path):
    link = tmp_path / "link.json"
    os.symlink(tmp_path / "nowhere", link)
    with pytest.raises(SerializationError, match="exists"):
        session.export_json(link)
    assert not (tmp_path / "nowhere").exists()


def test_a_file_named_like_the_old_temporary_is_left_alone(ctx, session, tmp_path):
    """Exports once wrote ``NAME.tmp`` first, replacing a user's file of that name."""
    ctx.cursor().ask("hi")
    mine = tmp_path / "out.json.tmp"
    mine.write_text("mine")
    session.export_json(tmp_path / "out.json")
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.tmp"]


def test_an_export_has_the_usual_file_permissions(session, tmp_path):
    reference = tmp_path / "plain"
    reference.write_text("")
    session.export_json(tmp_path / "out.json")
    assert (tmp_path / "out.json").stat().st_mode == reference.stat().st_mode


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_overwrite_is_a_bool(session, tmp_path, flag):
    out = tmp_path / "out.json"
    out.write_text("kept")
    with pytest.raises(ContextError, match=f"overwrite is True or False, not {flag!r}"):
        session.export_json(out, overwrite=flag)
    assert out.read_text() == "kept"


def test_a_folder_or_no_name_asks_for_a_file_name(session, tmp_path):
    with pytest.raises(SerializationError) as err:
        session.export_json(tmp_path, overwrite=True)
    assert str(err.value) == (
        f"cannot write session export {str(tmp_path)!r}: give a file name in that folder"
    )
    with pytest.raises(SerializationError, match=r"^cannot write session export '': give a file"):
        session.export_json("")
    assert list(tmp_path.iterdir()) == []


def test_an_export_does_not_keep_the_whole_session_in_memory(tmp_path):
    # Every exported node stayed in the session's node cache: after exporting a 50 MB
    # session (18,000 nodes) Python held 88 MB more until the session was closed.
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        cur = ChatContext(session, engine=FakeEngine()).cursor()
        for i in range(30):
            cur.ask(f"question {i}")
        expected = session_data(session)
    with Session.open(path) as session:
        session.export_json(tmp_path / "out.json")
        for info in session.conversations():
            session.conversation_nodes(info.id)
        assert len(session._nodes) == 0
        assert session_data(session) == expected
        with Session.import_json(tmp_path / "out.json") as again:
            assert session_data(again) == expected


# --- round trips of random sessions -----------------------------------------------------------

ROUND_TRIP = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


def test_each_scope_resumes_where_it_was_after_an_export_and_import(ctx, session, tmp_path):
    # Three conversations, each with a branch the user went back from: every saved
    # position is an older tip, not the conversation's newest node.
    tips = {}
    for name in ("one", "two", "three"):
        cur = ctx.cursor(title=name)
        cur.ask(f"{name} question")
        cur.fork().ask(f"{name} other branch")  # the newest node, elsewhere
        tips[cur.conversation_id] = cur.goto(cur.node_id).node_id
    notes = ctx.with_scope("notes")  # another component's places, in one of them
    first = next(iter(tips))
    notes.cursor(first).root()
    session.export_json(tmp_path / "e.json")
    with Session.import_json(tmp_path / "e.json", into=tmp_path / "imported.db") as imported:
        again = ChatContext(imported, engine=FakeEngine())
        for cid, tip in tips.items():
            assert imported.conversation(cid).head_id != tip
            assert again.cursor(cid).node_id == tip
        assert (
            again.with_scope("notes").cursor(first).node_id == imported.conversation(first).root_id
        )
        assert [p.scope for p in imported.saved_positions(first)] == ["default", "notes"]


def test_a_position_left_dangling_in_a_damaged_file_is_not_exported(ctx, session, tmp_path):
    # Written past Session.save_position's check, as an edit outside mp13 would: a saved
    # position at no node of its conversation. Exported, it made the import refuse the
    # whole file, the very copy a damaged session is told to make.
    cur = ctx.cursor()
    cur.ask("kept")
    other = ctx.cursor()
    other.ask("elsewhere")
    session._store.save_position("gone", cur.conversation_id, "no-such-node")
    session._store.save_position("moved", cur.conversation_id, other.node_id)
    session.export_json(tmp_path / "e.json")
    with Session.import_json(tmp_path / "e.json") as imported:
        assert imported.saved_positions(cur.conversation_id) == [
            SavedPosition(scope="default", node_id=cur.node_id)
        ]
        assert imported.resume_point("gone", cur.conversation_id) == cur.node_id


def _strip_seq(doc):
    """The export without ``seq``: an import numbers nodes anew (documented in ``_export``)."""
    out = copy.deepcopy(doc)
    for conv in out["conversations"]:
        for node in conv["nodes"]:
            node.pop("seq")
    return out


#: Scope names other components save positions under (the REPL's is "default"; a
#: Session.save_position scope may be any string, the empty one included).
SCOPES = st.sampled_from(["default", "other", "", "ü \x00 scope", "日本語"])


def _save_positions(session, saves):
    """Save positions of other scopes: ``(scope, conversation index, node index)``."""
    infos = session.conversations()
    for scope, i, j in saves:
        info = infos[i % len(infos)]
        nodes = session.conversation_nodes(info.id)
        session.save_position(scope, info.id, nodes[j % len(nodes)].id)


@ROUND_TRIP
@given(
    steps=st.lists(ops(st), min_size=5, max_size=30),
    saves=st.lists(st.tuples(SCOPES, st.integers(0, 99), st.integers(0, 999)), max_size=4),
)
def test_a_random_session_comes_back_the_same_reopened_and_through_an_export(
    tmp_path_factory, steps, saves
):
    folder = tmp_path_factory.mktemp("round")
    engine = FakeEngine()
    with Session.open(folder / "s.db") as session:
        play(ChatContext(session, engine=engine), engine, steps)
        _save_positions(session, saves)
        before = snapshot(session)
        session.export_json(folder / "e.json")
    with Session.open(folder / "s.db") as session:  # reopened: the same tree, row for row
        assert snapshot(session) == before
        assert session.verify().ok
    doc = _strict_json((folder / "e.json").read_text(encoding="utf-8"))  # no NaN, Infinity
    with Session.import_json(folder / "e.json") as imported:
        again = snapshot(imported)
        imported.export_json(folder / "again.json")
        # Exported, imported and exported again: the same JSON but for seq numbers.
        assert _strip_seq(json.loads((folder / "again.json").read_text("utf-8"))) == _strip_seq(doc)
        for old, new in zip(before, again, strict=True):
            # Node for node, but for seq: ids, parents, kinds, turns, commands, flags, hashes.
            assert [attrs.evolve(n, seq=0) for n in old["nodes"]] == [
                attrs.evolve(n, seq=0) for n in new["nodes"]
            ]
            # Saved positions too (export version 3): each scope resumes where it was.
            keys = ("info", "children", "settings", "messages", "leaf", "position", "resume")
            for key in (*keys, "positions"):
                assert old[key] == new[key], key
        # Search finds the imported texts as it found the exported ones.
        for conv in doc["conversations"]:
            for raw in conv["nodes"]:
                words = (raw.get("turn") or {}).get("text", "").split()
                if words:
                    found = {h.node_id for h in imported.search(words[0], limit=10**9)}
                    assert raw["id"] in found or not any(c.isalnum() for c in words[0])
        # A second copy under fresh ids: verified, and its trees have the same shape.
        report = imported.import_document(doc, new_ids=True)
        assert report.verified and imported.verify().ok
        copies = [imported.conversation_nodes(cid) for cid in report.conversations]
        assert [[(n.kind, n.turn, n.commands, n.depth) for n in c] for c in copies] == [
            [(n.kind, n.turn, n.commands, n.depth) for n in old["nodes"]] for old in before
        ]
        # Their saved positions name the copies' nodes, at the same places in the trees.
        for cid, nodes, old in zip(report.conversations, copies, before, strict=True):
            place = {n.id: i for i, n in enumerate(nodes)}
            was = {n.id: i for i, n in enumerate(old["nodes"])}
            assert [(p.scope, place[p.node_id]) for p in imported.saved_positions(cid)] == [
                (p.scope, was[p.node_id]) for p in old["positions"]
            ]


@pytest.mark.parametrize("upto", range(1, len(MIGRATIONS) + 1))
def test_a_session_of_any_older_schema_exports_and_imports_the_same(tmp_path, upto):
    old_session_file(tmp_path / "old.db", upto)
    with Session.open(tmp_path / "old.db") as old:  # migrated on open
        old.export_json(tmp_path / "old.json")
        expected = snapshot(old)
    with Session.import_json(tmp_path / "old.json") as imported:
        report = imported.verify()
        assert report.ok, report
        got = snapshot(imported)
        assert [attrs.evolve(n, seq=0) for n in got[0]["nodes"]] == [
            attrs.evolve(n, seq=0) for n in expected[0]["nodes"]
        ]
        assert got[0]["messages"] == expected[0]["messages"]
        assert got[0]["messages"]["u1"] == [
            {"role": "system", "content": "old sys"},
            {"role": "user", "content": "remember the walrus"},
        ]
        assert [h.node_id for h in imported.search("walrus")] == ["u1"]


def _strict_json(text):
    """``json.loads`` as other JSON readers parse: no ``NaN`` or ``Infinity``."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
def test_record_call_refuses_numbers_json_cannot_hold(ctx, session, tmp_path, number):
    # They were recorded, and the export held NaN/Infinity: a file jq or a browser refuse.
    cur = ctx.cursor()
    cur.ask("hi")
    before = session.conversation_nodes(cur.conversation_id)
    with pytest.raises(CommandError, match=r"NaN and infinities are not JSON .* as a string"):
        cur.record_call("engine.adapters.load", scale=number)
    with pytest.raises(CommandError):  # nested, and on a node that takes commands itself
        ctx.cursor().record_call("x", values={"list": [1, number]})
    assert session.conversation_nodes(cur.conversation_id) == before
    cur.record_call("engine.adapters.load", scale="nan", big=2**64, tiny=5e-324)
    session.export_json(tmp_path / "e.json")
    doc = _strict_json((tmp_path / "e.json").read_text(encoding="utf-8"))
    (conv,) = [c for c in doc["conversations"] if c["info"]["id"] == cur.conversation_id]
    assert conv["nodes"][-1]["commands"][0]["data"] == {
        "scale": "nan",
        "big": 2**64,
        "tiny": 5e-324,
    }


# --- this session's export additions together: tracebacks, positions, recursive calls ------


@dataclasses.dataclass
class Tree:
    name: str
    children: list[Tree] = dataclasses.field(default_factory=list)


JSONValue = dict[str, "JSONValue"] | list["JSONValue"] | str | int | float | bool | None


def count(root: Tree, extra: JSONValue = None) -> str:
    """Count a tree's nodes.

    Args:
        root: the tree
        extra: anything
    """

    def size(t: Tree) -> int:
        assert isinstance(t, Tree)  # converted to the declared class, all the way down
        return 1 + sum(size(c) for c in t.children)

    return f"{size(root)} nodes"


def _turns(cur, what):
    return [x for n in cur.path() if n.turn is not None for x in getattr(n.turn, what)]


def _fails(n: int) -> int:
    raise ZeroDivisionError(f"nothing to divide {n} by")


def divide(n: int) -> int:
    """Divide by nothing.

    Args:
        n: the number
    """
    return _fails(n)


_DEEP = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}


def test_a_failing_tool_positions_and_a_recursive_call_come_back_the_same_through_exports(
    tmp_path,
):
    """A session holding a failing tool's traceback (version 4), saved positions of two
    scopes (version 3) and a call whose arguments follow a recursive type: exporting the
    imported session gives the same JSON but for ``seq`` (documented in ``_export``), and
    an imported session's export, imported again, exports the very same bytes (its ``seq``
    numbers are already those an import gives)."""
    tb = Toolbox()
    tb.register(count)
    tb.register(divide)
    engine = FakeEngine()
    engine.script(
        FakeReply(
            tool_calls=[
                ToolCall("count", {"root": _DEEP, "extra": {"k": [1, {"x": None}]}}, id="c1")
            ]
        ),
        "four",
        FakeReply(tool_calls=[ToolCall("divide", {"n": 3}, id="c2")]),
        "cannot",
        "other branch",
    )
    with Session.open(tmp_path / "s.db") as session:
        ctx = ChatContext(session, engine=engine, toolbox=tb)
        cur = ctx.cursor(title="tools")
        cur.ask("how many?")
        cur.ask("divide 3")
        tip = cur.node_id
        cur.fork().ask("elsewhere")  # the newest node; the default scope goes back to tip
        cur.goto(tip)
        ctx.with_scope("notes").cursor(cur.conversation_id).root()
        results = _turns(cur, "tool_results")
        assert [r.content for r in results] == [
            "4 nodes",
            "Tool 'divide' failed: ZeroDivisionError: nothing to divide 3 by",
        ]
        assert results[1].traceback is not None and "in _fails" in results[1].traceback
        session.export_json(tmp_path / "one.json")
    first = (tmp_path / "one.json").read_text("utf-8")
    doc = json.loads(first)
    assert doc["version"] == 4
    with Session.import_json(tmp_path / "one.json", into=tmp_path / "i.db") as imported:
        assert imported.verify().ok
        again = ChatContext(imported, engine=FakeEngine(), toolbox=tb).cursor(
            doc["conversations"][0]["info"]["id"]
        )
        assert again.node_id == tip  # the saved position came back
        got = _turns(again, "tool_results")
        assert got == results  # the traceback included
        calls = _turns(again, "tool_calls")
        assert calls[0].arguments == {"root": _DEEP, "extra": {"k": [1, {"x": None}]}}
        imported.export_json(tmp_path / "two.json")
    second = (tmp_path / "two.json").read_text("utf-8")
    assert _strip_seq(json.loads(second)) == _strip_seq(doc)
    with Session.import_json(tmp_path / "two.json", into=tmp_path / "j.db") as twice:
        twice.export_json(tmp_path / "three.json")
    assert (tmp_path / "three.json").read_text("utf-8") == second
