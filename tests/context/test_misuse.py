# SPDX-License-Identifier: MIT
"""A caller's wrong types are typed errors that name the fix, raised before anything is
recorded, so a misused call never leaves data behind that breaks later requests."""

from __future__ import annotations

import pytest

from mp13_context import (
    ChatContext,
    CommandError,
    ContextError,
    CursorError,
    NotFoundError,
    Role,
    SerializationError,
    Session,
    StoreError,
    Turn,
    replay,
)
from mp13_toolbox import Toolbox


def _nodes(session: Session) -> int:
    return sum(len(session.path(session.leaf(c.root_id).id)) for c in session.conversations())


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda cur: cur.ask(5), CursorError, "a prompt is a string, not int"),
        (lambda cur: cur.batch("p1"), CursorError, r"not one str: batch\(\[text\]\)"),
        (lambda cur: cur.batch(3), CursorError, "a list of prompts, not one int"),
        (lambda cur: cur.batch(["ok", None]), CursorError, "a prompt is a string, not NoneType"),
        (lambda cur: cur.system.set(5), CommandError, r"system.set takes .* string \(got int\)"),
        (lambda cur: cur.system.add(["x"]), CommandError, r"system.add .* \(got list\)"),
        (lambda cur: cur.tools.add({"calc": "silent"}), CommandError, r"ToolsScope.*got dict"),
        (lambda cur: cur.tools.set(None), CommandError, r"ToolsScope.*got NoneType"),
        (lambda cur: cur.log(5), CommandError, r"log takes the note as a string \(got int\)"),
        (lambda cur: cur.record_call(5), CommandError, r"record_call takes .* \(got int\)"),
        (lambda cur: cur.record_call("x", o=object()), CommandError, "must be JSON values"),
        (lambda cur: cur.record("system"), CursorError, "record takes a Command, not str"),
        (lambda cur: cur.fork(label=5), ContextError, "a branch label must be a string, not int"),
        (lambda cur: cur.try_out(label=[]), ContextError, "a branch label must be a string"),
        (lambda cur: cur.trim("1"), CursorError, "turns to trim is a whole number, not str"),
        (lambda cur: cur.trim(-1), CursorError, r"cannot trim -1 user turns: give a count >= 0"),
        (lambda cur: cur.child("0"), CursorError, "a child index is a whole number, not str"),
        (
            lambda cur: cur.sibling(True),
            CursorError,
            "a sibling offset is a whole number, not bool",
        ),
        # A bare TypeError once the user turn was recorded.
        (lambda cur: cur.ask("x", on_event=5), ContextError, "on_event is a function .* not int"),
        (lambda cur: cur.retry(on_event="p"), ContextError, "on_event is a function .* not str"),
        (lambda cur: cur.batch(["x"], on_event=5), ContextError, "on_event is a function"),
        (lambda cur: cur.batch(["x", 5]), CursorError, r"^prompts\[1\]: a prompt is a string"),
    ],
)
def test_wrong_types_on_a_cursor_raise_and_record_nothing(ctx, session, call, error, match):
    cur = ctx.cursor()
    cur.ask("hello")
    before = (_nodes(session), cur.node_id, cur.messages())
    with pytest.raises(error, match=match):
        call(cur)
    assert (_nodes(session), cur.node_id, cur.messages()) == before
    assert cur.ask("still works").text  # the branch is not poisoned for later requests


def test_wrong_parts_of_a_context_raise_at_once(session, engine):
    with pytest.raises(ContextError, match=r"needs a Session, not str; open one"):
        ChatContext("chats.db", engine=engine)
    with pytest.raises(ContextError, match=r"engine must be an mp13_engine.Engine .* not int"):
        ChatContext(session, engine=5)
    with pytest.raises(ContextError, match=r"toolbox must be an mp13_toolbox.Toolbox, not dict"):
        ChatContext(session, engine=engine, toolbox={})
    with pytest.raises(ContextError, match=r"^approval is a function \(or None\), not str"):
        ChatContext(session, engine=engine, approval="yes")
    with pytest.raises(ContextError, match=r"^on_event is a function \(or None\), not int"):
        ChatContext(session, engine=engine, on_event=5)
    assert ChatContext(session, engine=engine, toolbox=Toolbox()).cursor().ask("hi").text


def test_session_misuse_is_typed(ctx, session, tmp_path):
    cur = ctx.cursor()
    cur.ask("hello")
    with pytest.raises(ContextError, match="a conversation title must be a string, not int"):
        ctx.cursor(title=5)
    with pytest.raises(ContextError, match="a conversation title must be a string, not bytes"):
        session.set_title(cur.conversation_id, b"t")
    with pytest.raises(ContextError, match="a scope is a non-empty name"):
        ctx.with_scope(5)
    with pytest.raises(ContextError, match="search text must be a string of words, got int"):
        session.search(5)
    with pytest.raises(ContextError, match=r"replays a Cursor, a ConversationInfo or a .* not int"):
        replay(5, into=session, engine=ctx.engine)
    missing = tmp_path / "no such folder" / "out.json"
    with pytest.raises(SerializationError, match=r"cannot write session export .* folder exists"):
        session.export_json(missing)
    assert list(tmp_path.iterdir()) == []  # no half-written file or temporary left behind
    session.export_json(tmp_path / "out.json")
    assert Session.import_json(tmp_path / "out.json").search("hello")


@pytest.mark.parametrize("path", [1, 3.0, None, ["chats.db"]])
def test_a_file_name_that_is_not_a_path_is_refused(ctx, session, path):
    """An int would open (and then close) that file descriptor: 1 is standard output."""
    with pytest.raises(ContextError, match=r"is a path \(a str or os.PathLike\), not"):
        Session.open(path)
    with pytest.raises(ContextError, match="an export file is a path"):
        session.export_json(path)
    with pytest.raises(ContextError, match="an export file is a path"):
        Session.import_json(path)
    with pytest.raises(ContextError, match="a copy's file is a path"):
        session.save_copy(path)


def test_an_id_sqlite_cannot_encode_names_nothing(ctx, session, tmp_path):
    """SQLite takes UTF-8 only, so an id with a lone surrogate can name no stored node or
    conversation: it is not found (no store failure); a file name is a StoreError."""
    cur = ctx.cursor()
    cur.ask("hello")
    bad = "\ud800"
    for call in (session.node, session.path, session.set_main_line, cur.goto):
        with pytest.raises(NotFoundError, match="no node"):
            call(bad)
    with pytest.raises(NotFoundError, match="no conversation"):
        session.conversation(bad)
    assert session.children(bad) == [] and not session.has_children(bad)
    assert session.position(bad, cur.conversation_id) is None
    assert session.position("default", bad) is None
    with pytest.raises(StoreError, match="cannot open session file"):
        Session.open(str(tmp_path / "chats-\ud800.db"))


def test_a_position_is_saved_only_for_a_node_of_its_conversation(ctx, session):
    cur = ctx.cursor()
    cur.ask("hello")
    with pytest.raises(NotFoundError, match="no node 'nope'"):
        session.save_position("default", cur.conversation_id, "nope")
    with pytest.raises(NotFoundError, match="is not in conversation 'elsewhere'"):
        session.save_position("default", "elsewhere", cur.node_id)
    with pytest.raises(ContextError, match="a scope name is a UTF-8 string"):
        session.save_position("\ud800", cur.conversation_id, cur.node_id)
    assert session.position("default", cur.conversation_id) == cur.node_id


@pytest.mark.parametrize("node_id", [["n"], {"n": 1}, 5, None])
def test_an_id_that_is_not_a_string_names_no_node(ctx, session, node_id):
    cur = ctx.cursor()
    cur.ask("hello")
    for call in (session.node, session.path, session.settings_at, session.messages, cur.goto):
        with pytest.raises(NotFoundError, match=r"a node id is a string such as cursor\.node_id"):
            call(node_id)


def test_a_closed_session_says_so(ctx, session):
    cur = ctx.cursor()
    cur.ask("hello")
    session.close()
    assert session.closed
    with pytest.raises(StoreError, match="this session is closed, so a reply could not be"):
        cur.ask("again")
    with pytest.raises(StoreError, match=r"is closed; open it again with Session.open\(path\)"):
        session.search("hello")


def test_copying_or_checking_a_closed_session_says_it_is_closed(ctx, tmp_path):
    """save_copy of a closed session crashed the interpreter (a segfault in the SQLite
    backup of a closed connection); check() reported "Cannot operate on a closed
    database" as damage found in the file."""
    session = Session.open(tmp_path / "s.db")
    ChatContext(session, engine=ctx.engine).cursor().ask("hello")
    session.close()
    with pytest.raises(StoreError, match=r"is closed; open it again with Session.open\(path\)"):
        session.save_copy(tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()
    with pytest.raises(StoreError, match=r"is closed; open it again with Session.open\(path\)"):
        session.check()
    with Session.open(tmp_path / "s.db") as again:
        assert again.check().ok and again.search("hello")


def test_append_names_a_kind_that_is_not_a_node_kind(session):
    # A string kind used to be told "a TURN node needs a turn and other kinds must not
    # have one", even when a turn was given.
    conv = session.new_conversation()
    with pytest.raises(CursorError, match=r"kind is a NodeKind \(NodeKind\.ROOT, .*\), not 'turn'"):
        session.append(conv.root_id, "turn", turn=Turn(role=Role.USER, text="x"))
    assert session.children(conv.root_id) == []


def test_a_closed_session_reads_no_cached_node_either(ctx, session):
    # Session.closed promises that every read then raises StoreError; nodes this
    # session had already read (all of a live cursor's path) used to come back from
    # its cache after close().
    cur = ctx.cursor()
    cur.ask("hello")
    session.node(cur.node_id)
    session.close()
    reads = (session.node, session.path, session.settings_at, session.messages)
    for read in reads:
        with pytest.raises(StoreError, match=r"is closed; open it again"):
            read(cur.node_id)
    with pytest.raises(StoreError, match=r"is closed; open it again"):
        cur.messages()
