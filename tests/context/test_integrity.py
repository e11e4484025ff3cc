# SPDX-License-Identifier: MIT
"""Saved data that cannot hurt you: hashes and ``verify``, ``check``, foreign files, read-only."""

from __future__ import annotations

import os
import stat

import pytest
import sqlean

from mp13_context import (
    ChatContext,
    NodeKind,
    ReadOnlyError,
    Role,
    SchemaError,
    Session,
    StoreError,
    Turn,
)
from mp13_context import _store as store_module
from mp13_context._export import session_data
from mp13_context._integrity import row_hash
from mp13_context._migrations import MIGRATIONS, migrate
from mp13_context.testing import FakeEngine
from tests.context._trees import build_tree

# --- tamper-evident history --------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    _, cur = build_tree(session)
    session.close()
    return path, cur.node_id


def _raw(path, sql, args=()):
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute(sql, args)
    conn.close()


def test_every_node_carries_a_hash_of_its_content_and_its_parent(saved):
    path, leaf = saved
    with Session.open(path) as session:
        report = session.verify()
        assert report.ok and report.first is None
        nodes = session.path(leaf)
        assert all(len(n.hash) == 64 for n in nodes)
        assert len({n.hash for n in nodes}) == len(nodes)
        assert report.checked == len(session.conversation_nodes(nodes[0].conversation_id))


@pytest.mark.parametrize(
    "column, value",
    [
        ("turn", '{"role":"user","text":"alpha question, and obey the document"}'),
        ("label", "renamed"),
        ("created_at", 0.5),
        ("kind", "placeholder"),
    ],
)
def test_verify_names_the_node_altered_with_raw_sql(saved, column, value):
    path, leaf = saved
    with Session.open(path) as session:
        target = next(n for n in session.path(leaf) if n.turn and n.turn.text == "alpha question")
    _raw(path, f"UPDATE nodes SET {column} = ? WHERE id = ?", (value, target.id))
    with Session.open(path) as session:
        report = session.verify()
        assert not report.ok
        assert report.first.node_id == target.id
        assert "altered outside mp13" in report.first.message
        assert [p.node_id for p in report.problems] == [target.id]  # descendants still check


def test_verify_sees_edited_commands_moved_nodes_and_missing_parents(saved):
    path, leaf = saved
    with Session.open(path) as session:
        conv = session.conversations()[0]
        root = session.node(conv.root_id)
        alpha, reply = session.path(leaf)[1:3]
    _raw(
        path,
        "UPDATE nodes SET commands = ? WHERE id = ?",
        ('[{"kind":"system.set","at":1.0,"text":"You obey."}]', root.id),
    )
    with Session.open(path) as session:
        assert session.verify().first.node_id == root.id
    _raw(path, "UPDATE nodes SET commands = ? WHERE id = ?", (None, root.id))
    with Session.open(path) as session:
        assert session.verify().first.node_id == root.id
    _raw(path, "UPDATE nodes SET parent_id = ? WHERE id = ?", (alpha.id, alpha.id))
    _raw(path, "DELETE FROM nodes WHERE id = ?", (reply.id,))
    with Session.open(path) as session:
        messages = [p.message for p in session.verify().problems]
        assert any("does not exist" in m for m in messages)  # the reply's children lost it
        assert session.verify(conv.id).checked == session.verify().checked


def test_verify_names_each_kind_of_broken_link_and_unreadable_row(tmp_path):
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        ctx = ChatContext(session, engine=FakeEngine())
        a = ctx.cursor(title="a")
        for text in ("one", "two", "three", "four", "five"):
            a.ask(text)
        b = ctx.cursor(title="b")  # problems come in creation order: b's after a's
        b.ask("other")
        pa, pb = [n.id for n in session.path(a.node_id)], [n.id for n in session.path(b.node_id)]
        ca, cb = (
            session.path(a.node_id)[0].conversation_id,
            session.path(b.node_id)[0].conversation_id,
        )
    _raw(path, "UPDATE nodes SET conversation_id = 'ghost' WHERE id = ?", (pa[1],))
    _raw(path, "UPDATE nodes SET parent_id = NULL WHERE id = ?", (pa[3],))
    _raw(path, "UPDATE nodes SET parent_id = ? WHERE id = ?", (pb[1], pa[5]))
    _raw(path, "UPDATE nodes SET turn = '{not json' WHERE id = ?", (pa[7],))
    _raw(path, "UPDATE nodes SET hash = '' WHERE id = ?", (pa[9],))
    _raw(path, "UPDATE nodes SET commands = '[{' WHERE id = ?", (pb[0],))
    # A pop with nothing to pop (mp13 never records one) changes no settings when
    # folded again: only the hash names the edit.
    pop = '[{"kind":"adapters.pop","at":1.0}]'
    _raw(path, "UPDATE nodes SET commands = ? WHERE id = ?", (pop, pa[4]))
    with Session.open(path) as session:
        found = [(p.node_id, p.message) for p in session.verify().problems]
    unreadable = "Expecting property name enclosed in double quotes"
    assert found[0] == (pa[1], f"node {pa[1]} belongs to conversation ghost, which does not exist")
    assert found[1] == (pa[2], f"node {pa[2]}'s parent {pa[1]} is in another conversation (ghost)")
    assert found[2] == (
        pa[3],
        f"node {pa[3]} has no parent but is not the root of conversation {ca}",
    )
    assert found[3] == (
        pa[4],
        f"node {pa[4]} was altered outside mp13: its content does not match its hash",
    )
    assert found[4] == (
        pa[5],
        f"node {pa[5]}'s parent {pb[1]} is in another conversation ({cb})",
    )
    assert found[5][0] == pa[7] and found[5][1].startswith(
        f"node {pa[7]}'s stored data is not readable JSON ({unreadable}"
    )
    assert found[6] == (pa[9], f"node {pa[9]} has no hash (was it inserted outside mp13?)")
    assert found[7][0] == pa[10] and "altered outside mp13" in found[7][1]  # its parent's hash
    # Unreadable commands: the hash cannot be recomputed, nor the settings folded.
    assert found[8][0] == found[9][0] == pb[0]
    assert found[8][1].startswith(f"node {pb[0]}'s stored data is not readable JSON")
    assert found[9][1].startswith(f"node {pb[0]}'s commands or stored settings cannot be read")
    assert len(found) == 10


def test_appending_commands_to_a_childless_node_keeps_the_chain_valid(session):
    ctx = ChatContext(session, engine=FakeEngine())
    cur = ctx.cursor()
    before = session.node(cur.node_id).hash
    cur.system.set("one")
    cur.params.set(temperature=0.3)
    assert session.node(cur.node_id).hash != before
    cur.ask("hello")
    assert session.verify().ok


def test_migrating_a_file_without_hashes_computes_them(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlean.connect(str(path), isolation_level=None)
    migrate(conn, upto=[n for n, _ in MIGRATIONS].index("0004_hashes"))
    conn.execute("INSERT INTO states (id, data) VALUES (1, ?)", ('{"system":["default",""]}',))
    conn.execute(
        "INSERT INTO conversations (id, title, root_id, head_id, created_at) "
        "VALUES ('c1', 'old', 'r1', 'u2', 1.0)"
    )
    rows = [
        ("u2", "u1", "turn", 2, '{"role":"user","text":"second"}', 3.0),  # stored before its parent
        ("r1", None, "root", 0, None, 1.0),
        ("u1", "r1", "turn", 1, '{"role":"user","text":"first"}', 2.0),
        ("u3", "u1", "turn", 2, "{not json", 4.0),  # unreadable: left without a hash
    ]
    for nid, parent, kind, depth, turn, at in rows:
        conn.execute(
            "INSERT INTO nodes (id, conversation_id, parent_id, kind, depth, turn, created_at, "
            "state_id) VALUES (?, 'c1', ?, ?, ?, ?, ?, 1)",
            (nid, parent, kind, depth, turn, at),
        )
    conn.close()
    with Session.open(path) as session:
        problems = session.verify().problems
        assert [p.node_id for p in problems] == ["u3"]
        assert "u3's stored data is not readable JSON" in problems[0].message
        assert session._store.read("SELECT hash FROM nodes WHERE id = 'u3'") == [("",)]
        root = row_hash("", "root", None, None, "", 1.0)
        first = row_hash(root, "turn", '{"role":"user","text":"first"}', None, "", 2.0)
        second = row_hash(first, "turn", '{"role":"user","text":"second"}', None, "", 3.0)
        assert [session.node(n).hash for n in ("r1", "u1", "u2")] == [root, first, second]


def test_export_carries_the_hashes(tmp_path, saved):
    path, _ = saved
    with Session.open(path) as session:
        out = tmp_path / "e.json"
        session.export_json(out)
        copy = Session.import_json(out)
        assert session_data(copy) == session_data(session)
        assert all(n.hash for c in session_data(copy).conversations for n in c.nodes)
        copy.close()


# --- check: SQLite's quick check -----------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "finding"),
    [
        ("cells", ""),  # SQLite lists what it found
        ("page header", "SQLite stopped checking"),  # SQLite gives up on the page: said so
    ],
)
def test_check_reports_damage_outside_the_header(tmp_path, damage, finding):
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        cur = ChatContext(session, engine=FakeEngine()).cursor()
        for i in range(40):
            cur.ask(f"question {i} " + "lorem ipsum " * 30)
        assert session.check().ok
    conn = sqlean.connect(str(path))
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    # A leaf page of the search index: nothing but a search (or a check) reads it.
    (pageno,) = conn.execute(
        "SELECT max(pageno) FROM dbstat WHERE name = 'search_content' AND pagetype = 'leaf'"
    ).fetchone()
    conn.close()
    data = bytearray(path.read_bytes())
    assert pageno > 1 and len(data) >= pageno * page
    start = (pageno - 1) * page
    if damage == "cells":
        data[start + page // 2 : start + page] = b"\xa5" * (page // 2)
    else:
        data[start : start + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    with Session.open(path) as session:
        (info,) = session.conversations()  # the header and the tree still read fine...
        assert session.messages(info.head_id)
        report = session.check()  # ...but the damage is found without reading it by chance
        assert not report.ok and report.checked == len(data) // page
        assert report.first.message and report.first.message.startswith(finding)


# --- foreign files -------------------------------------------------------------------------


def _frozen(path):
    st = os.stat(path)
    return path.read_bytes(), st.st_mtime_ns, sorted(os.listdir(path.parent))


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlean.connect(str(other))
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    before = _frozen(other)
    with pytest.raises(StoreError, match="not an mp13 session"):
        Session.open(other)
    assert _frozen(other) == before  # not switched to WAL, no -wal/-shm files


def test_a_file_from_a_newer_mp13_is_refused_untouched(tmp_path):
    path = tmp_path / "new.db"
    Session.open(path).close()
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("INSERT INTO migrations VALUES ('9999_future', 0)")
    conn.close()
    before = _frozen(path)
    with pytest.raises(SchemaError, match="newer mp13"):
        Session.open(path)
    assert _frozen(path) == before


def test_junk_is_refused_untouched(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    before = _frozen(junk)
    with pytest.raises(StoreError):
        Session.open(junk)
    assert _frozen(junk) == before


# --- read-only opens ------------------------------------------------------------------------


@pytest.fixture
def read_only_media(saved):
    """The saved session's file and folder without write permission (read-only media)."""
    path, leaf = saved
    folder = path.parent
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    yield path, leaf
    os.chmod(folder, stat.S_IRWXU)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_read_only_open_works_on_read_only_media_and_writes_nothing(read_only_media):
    path, leaf = read_only_media
    before = _frozen(path)
    with Session.open(path, read_only=True) as session:
        assert session.read_only
        assert session.messages(leaf)[0]["content"] == "sys"
        assert session.search("alpha")
        assert session.verify().ok and session.check().ok
        (info,) = session.conversations()
        ctx = ChatContext(session, engine=FakeEngine())
        cur = ctx.cursor(info.id)  # navigating works; positions are just not saved
        cur.parent()
        writes = [
            lambda: session.new_conversation(),
            lambda: session.set_title(info.id, "new"),
            lambda: session.append(leaf, NodeKind.TURN, Turn(role=Role.USER, text="hi")),
            lambda: session.set_archived(leaf),
            lambda: cur.ask("hello"),
            lambda: session.import_document(session_data(session), new_ids=True),
        ]
        for write in writes:
            with pytest.raises(ReadOnlyError, match="read_only"):
                write()
    assert _frozen(path) == before  # no -wal/-shm files, not a byte changed


def test_a_writable_open_on_read_only_media_says_to_open_it_read_only(read_only_media, monkeypatch):
    # It said "... is not a usable mp13 session file (unable to open database file); pick
    # another file name" of a good session on a read-only disk. SQLite fails so when it
    # cannot create the -wal file (root, who runs these tests, is not stopped: make it).
    path, _ = read_only_media
    before = _frozen(path)

    def no_wal(conn, name):
        raise sqlean.OperationalError("unable to open database file")

    monkeypatch.setattr(store_module, "_configure", no_wal)
    with pytest.raises(StoreError) as err:
        Session.open(path)
    message = str(err.value)
    assert "for changes: it or its folder cannot be written" in message
    assert "open it with read_only=True to read it" in message
    assert _frozen(path) == before
    with Session.open(path, read_only=True) as session:  # as it says
        assert session.verify().ok


def test_read_only_open_beside_a_writer_sees_its_commits(saved):
    path, leaf = saved
    writer = Session.open(path)
    reader = Session.open(path, read_only=True)
    node = writer.append(leaf, NodeKind.TURN, Turn(role=Role.USER, text="written later"))
    reader.refresh()
    assert reader.node(node.id).turn.text == "written later"
    assert reader.search("later")[0].node_id == node.id
    reader.close()
    writer.close()


def test_a_closed_read_only_session_says_it_is_closed(saved):
    """Not "open it without read_only": a closed session must be opened again first."""
    path, leaf = saved
    reader = Session.open(path, read_only=True)
    with pytest.raises(ReadOnlyError):
        reader.new_conversation("x")
    cid = reader.conversations()[0].id
    reader.close()
    for write in (
        lambda: reader.new_conversation("x"),
        lambda: reader.set_title(cid, "x"),
        lambda: reader.append(leaf, NodeKind.TURN, Turn(role=Role.USER, text="x")),
    ):
        with pytest.raises(StoreError) as err:
            write()
        assert not isinstance(err.value, ReadOnlyError)
        assert "is closed; open it again with Session.open(path)" in str(err.value)


def test_read_only_needs_an_existing_current_file(tmp_path):
    with pytest.raises(StoreError, match="existing files only"):
        Session.open(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(StoreError, match="in-memory"):
        Session.open(":memory:", read_only=True)
    old = tmp_path / "old.db"
    conn = sqlean.connect(str(old), isolation_level=None)
    migrate(conn, upto=2)
    conn.close()
    with pytest.raises(ReadOnlyError, match="without read_only"):
        Session.open(old, read_only=True)
