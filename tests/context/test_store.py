# SPDX-License-Identifier: MIT
"""The SQLite store: migrations, WAL, incremental saves, reopen, readers, search, JSON."""

from __future__ import annotations

import json
import threading

import pytest
import sqlean

from mp13_context import (
    ChatContext,
    Command,
    CommandKind,
    ContextError,
    CursorError,
    ImportConflictError,
    NodeKind,
    NotFoundError,
    Role,
    SchemaError,
    SerializationError,
    Session,
    StoreError,
    Turn,
)
from mp13_context._export import session_data
from mp13_context._migrations import MIGRATIONS, migrate
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall
from tests.context._trees import build_tree, old_session_file

NAMES = [name for name, _ in MIGRATIONS]


def test_blank_file_gets_every_migration_and_wal(tmp_path):
    path = tmp_path / "s.db"
    Session.open(path).close()
    conn = sqlean.connect(str(path))
    assert [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")] == NAMES
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


@pytest.mark.parametrize("upto", range(1, len(MIGRATIONS)))
def test_every_older_schema_migrates_and_keeps_its_data(tmp_path, upto):
    path = tmp_path / "old.db"
    old_session_file(path, upto)
    session = Session.open(path)
    conn = sqlean.connect(str(path))
    assert [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")] == NAMES
    conn.close()
    assert session.messages("u1") == [
        {"role": "system", "content": "old sys"},
        {"role": "user", "content": "remember the walrus"},
    ]
    assert [h.node_id for h in session.search("walrus")] == ["u1"]  # backfilled index
    assert session.verify().ok and session.node("u1").hash  # backfilled hashes
    cur = ChatContext(session, engine=FakeEngine()).cursor("c1")
    assert cur.ask("and now?").text == "echo: and now?"
    session.close()


def test_unknown_migration_is_refused(tmp_path):
    path = tmp_path / "new.db"
    Session.open(path).close()
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute("INSERT INTO migrations VALUES ('9999_future', 0)")
    conn.close()
    with pytest.raises(SchemaError, match="newer mp13"):
        Session.open(path)


def test_foreign_files_are_refused(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlean.connect(str(other))
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an mp13 session"):
        Session.open(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError):
        Session.open(junk)


def test_a_file_that_is_not_sqlite_or_is_cut_short_says_what_to_do_and_stays_as_it_was(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not an SQLite file, or its first page is damaged"):
        Session.open(junk)
    assert junk.read_bytes() == b"this is not sqlite at all" * 100
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        build_tree(session)
    whole = path.read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(whole[: len(whole) // 2])  # a copy that stopped half way
    for read_only in (False, True):
        # It said "not a usable mp13 session file ...; pick another file name": the
        # user's own (damaged) session, with no word of a backup or recovery.
        with pytest.raises(StoreError, match=r"the file is damaged: restore it from a backup"):
            Session.open(cut, read_only=read_only)
    assert cut.read_bytes() == whole[: len(whole) // 2]


def test_a_file_another_connection_keeps_locked_says_so_and_loses_nothing(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    cur = ChatContext(session, engine=FakeEngine()).cursor()
    cur.ask("hello")
    before = session_data(session)
    other = sqlean.connect(str(path), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another program in the middle of a write
    session._store.conn.execute("PRAGMA busy_timeout = 50")  # not the 10 s wait
    with pytest.raises(StoreError) as err:
        session.new_conversation("more")
    assert "database is locked; another connection is writing to the file" in str(err.value)
    assert "let it finish or close it, then try again" in str(err.value)
    assert len(session.search("hello")) == 2  # reads go on while it writes (WAL)
    other.execute("ROLLBACK")
    other.close()
    assert session_data(session) == before  # the refused change left nothing behind
    session.new_conversation("more")  # and the retry works
    assert len(session.conversations()) == 2
    session.close()


def test_a_full_disk_says_to_make_room_and_keeps_what_was_saved(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    cur = ChatContext(session, engine=FakeEngine()).cursor()
    cur.ask("hello")
    before = session_data(session)
    session._store.conn.execute(  # every later insert fails, as on a full disk
        "CREATE TEMP TRIGGER refuse BEFORE INSERT ON nodes "
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    with pytest.raises(StoreError) as err:
        session.append(cur.node_id, turn=Turn(role=Role.USER, text="more"))
    assert "database or disk is full; make room on the disk" in str(err.value)
    assert "what was saved before is kept" in str(err.value)
    assert session_data(session) == before
    session._store.conn.execute("DROP TRIGGER temp.refuse")
    session.append(cur.node_id, turn=Turn(role=Role.USER, text="more"))  # room again: it saves
    session.close()


def test_reopen_gives_identical_trees(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    _, cur = build_tree(session)
    before = session_data(session)
    leaf, state, messages = cur.node_id, session.settings_at(cur.node_id), cur.messages()
    session.close()
    again = Session.open(path)
    assert session_data(again) == before
    assert again.settings_at(leaf) == state
    assert again.messages(leaf) == messages
    ctx = ChatContext(again, engine=FakeEngine())
    assert ctx.cursor(before.conversations[0].info.id).node_id == leaf  # saved position
    again.close()


def test_save_copy_is_an_exact_copy_and_never_overwrites(tmp_path):
    session = Session.open(tmp_path / "s.db")
    _, cur = build_tree(session)
    target = tmp_path / "copy.db"
    session.save_copy(target)
    copy = Session.open(target)
    assert session_data(copy) == session_data(session)
    assert copy.verify().ok
    cid = cur.conversation_id
    assert copy.position("default", cid) == session.position("default", cid) == cur.node_id
    cur.ask("after the copy")  # the original stays open and writable; the copy is apart
    assert session_data(copy) != session_data(session)
    copy.close()
    with pytest.raises(StoreError, match="never overwrites"):
        session.save_copy(target)
    session.close()


def test_a_failed_copy_leaves_no_file_and_says_what_to_do(tmp_path):
    session = Session.open(tmp_path / "s.db")
    build_tree(session)
    before = session_data(session)
    missing = tmp_path / "no folder" / "copy.db"
    with pytest.raises(StoreError) as err:
        session.save_copy(missing)
    assert str(err.value).endswith(
        "check that its folder exists and can be written, and that the disk has room "
        "(the session itself is unchanged)"
    )

    class FullDisk:  # the backup fails half-way, as on a full disk
        def __init__(self, conn):
            self.conn = conn

        def backup(self, target):
            target.execute("CREATE TABLE half(x)")
            raise sqlean.OperationalError("database or disk is full")

    real = session._store.conn
    session._store.conn = FullDisk(real)
    target = tmp_path / "copy.db"
    with pytest.raises(StoreError, match="database or disk is full; check that its folder"):
        session.save_copy(target)
    session._store.conn = real
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db", "s.db-shm", "s.db-wal"]
    session.save_copy(target)  # the retry is not blocked by a half-written file
    with Session.open(target) as copy:
        assert session_data(copy) == before
    with pytest.raises(StoreError, match=r"^a copy goes into a file: give a file name, not "):
        session.save_copy(":memory:")
    session.close()


def test_save_copy_with_overwrite_replaces_an_old_copy_whole(tmp_path):
    session = Session.open(tmp_path / "s.db")
    _, cur = build_tree(session)
    target = tmp_path / "copy.db"
    session.save_copy(target)
    cur.ask("after the first copy")
    with pytest.raises(ContextError, match="overwrite is True or False"):
        session.save_copy(target, overwrite="no")
    session.save_copy(target, overwrite=True)  # a nightly backup to one name
    with Session.open(target) as copy:
        assert session_data(copy) == session_data(session) and copy.verify().ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "s.db", "s.db-shm", "s.db-wal"]
    session.save_copy(tmp_path / "new.db", overwrite=True)  # a new name works as well
    assert Session.open(tmp_path / "new.db", read_only=True).conversations()
    with pytest.raises(StoreError, match="this session's own file"):
        session.save_copy(tmp_path / "s.db", overwrite=True)
    with pytest.raises(StoreError, match="it is a folder"):
        session.save_copy(tmp_path, overwrite=True)
    dangling = tmp_path / "link.db"
    dangling.symlink_to(tmp_path / "gone.db")
    session.save_copy(dangling, overwrite=True)  # the link is replaced, not followed
    assert not dangling.is_symlink() and Session.open(dangling, read_only=True).conversations()
    session.close()


def test_save_copy_never_replaces_a_file_that_is_open_or_has_a_journal(tmp_path):
    # A -wal (or -journal) file left next to the old file would be applied to the new
    # copy when it is opened, damaging it; and it may mean the file is open right now.
    session = Session.open(tmp_path / "s.db")
    build_tree(session)
    target = tmp_path / "copy.db"
    other = Session.open(target)  # open elsewhere: it has a -wal and a -shm file
    other.new_conversation("kept")
    before = session_data(other)
    with pytest.raises(StoreError, match=r"copy.db-wal' lies next to it, so it may be open"):
        session.save_copy(target, overwrite=True)
    assert session_data(other) == before  # nothing was changed
    other.close()
    stale = tmp_path / "stale.db"
    session.save_copy(stale)
    (tmp_path / "stale.db-journal").write_bytes(b"a hot journal")
    with pytest.raises(StoreError, match="pick a new file name"):
        session.save_copy(stale, overwrite=True)
    assert (tmp_path / "stale.db-journal").read_bytes() == b"a hot journal"
    session.close()


def test_each_mutation_is_its_own_small_transaction(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    _ctx, cur = build_tree(session)
    reader = sqlean.connect(str(path))
    count = lambda: reader.execute("SELECT count(*) FROM nodes").fetchone()[0]  # noqa: E731
    n = count()
    conn = session._store.conn
    changes = conn.total_changes
    turn = Turn(role=Role.USER, text="more text")
    node = session.append(cur.node_id, NodeKind.TURN, turn)
    small = conn.total_changes - changes
    assert count() == n + 1  # committed at once, visible to another connection
    for _ in range(50):
        node = session.append(node.id, NodeKind.TURN, turn)
    costs = []
    for _ in range(9):
        changes = conn.total_changes
        node = session.append(node.id, NodeKind.TURN, turn)
        costs.append(conn.total_changes - changes)
    # The cost does not grow with the session. (FTS5 merges its index segments now and
    # then, inside the append that triggers it: periodic work, so the median is compared.)
    assert sorted(costs)[len(costs) // 2] == small
    changes = conn.total_changes
    session.set_archived(node.id)
    assert conn.total_changes - changes == 1
    reader.close()
    session.close()


def test_several_readers_at_once_while_writing(tmp_path):
    path = tmp_path / "s.db"
    writer = Session.open(path)
    _, cur = build_tree(writer)
    readers = [Session.open(path), Session.open(path)]
    errors = []
    stop = threading.Event()

    def read(session):
        try:
            while not stop.is_set():
                session.refresh()
                assert session.messages(cur.node_id)[0]["content"] == "sys"
                session.search("alpha")
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    for t in threads:
        t.start()
    ctx = ChatContext(writer, engine=FakeEngine())
    c = ctx.cursor(cur.conversation_id)
    for i in range(20):
        c.ask(f"write {i}")
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    readers[0].refresh()
    assert readers[0].messages(c.node_id)[-1]["content"] == "echo: write 19"
    for s in [writer, *readers]:
        s.close()


def test_search_across_conversations(session):
    engine = FakeEngine()
    ctx = ChatContext(session, engine=engine)
    a = ctx.cursor(title="first")
    a.ask("the quick brown fox")
    b = ctx.cursor(title="second")
    b.ask("a lazy brown dog")
    hits = session.search("brown")
    assert {h.conversation_id for h in hits} == {a.conversation_id, b.conversation_id}
    assert all("[brown]" in h.snippet for h in hits)
    hits = session.search("fox", conversation_id=a.conversation_id)
    assert [h.role for h in hits] == [Role.ASSISTANT, Role.USER]  # newest first
    assert hits[1].title == "first"
    assert session.node(hits[1].node_id).turn.text == "the quick brown fox"
    ranked = session.search("quick fox", order="rank")
    assert ranked[0].role is Role.USER  # the shorter match ranks first
    assert session.search("brown dog")[0].conversation_id == b.conversation_id
    assert session.search('fox" OR "') == []  # FTS syntax in plain text is harmless
    assert session.search("") == []
    assert len(session.search("brown OR fox", raw=True)) >= 2
    with pytest.raises(StoreError, match="FTS5"):
        session.search('"unbalanced', raw=True)


def test_a_search_of_a_few_words_makes_its_snippets_with_its_hits(session):
    # one statement over the word index, not a second MATCH per batch for the snippets
    ctx = ChatContext(session, engine=FakeEngine())
    ctx.cursor(title="t").ask("the quick brown fox")
    statements = []
    session._store.conn.set_trace_callback(statements.append)
    hits = session.search("quick fox")
    session._store.conn.set_trace_callback(None)
    assert hits and all("[quick]" in h.snippet and "[fox]" in h.snippet for h in hits)
    assert sum("FROM search " in s for s in statements) == 1


@pytest.mark.parametrize("limit", ["5", 0, -1, 1.5, None, True])
def test_search_limit_is_a_whole_number_of_hits(session, limit):
    # "5" and -1 returned every hit, 0 none, 1.5 and None a StoreError about datatypes.
    ChatContext(session, engine=FakeEngine()).cursor().ask("hello there")
    with pytest.raises(ContextError, match=r"^search limit must be a whole number >= 1, got "):
        session.search("hello", limit=limit)
    assert len(session.search("hello", limit=1)) == 1


def test_a_search_limit_beyond_sqlites_integers_means_all_hits(session):
    # It raised a bare OverflowError ("Python int too large to convert to SQLite INTEGER").
    cur = ChatContext(session, engine=FakeEngine()).cursor()
    cur.ask("hello there")
    cur.ask("hello again")
    hits = session.search("hello", limit=10**20)
    assert len(hits) == 4 and hits == session.search("hello", limit=4)


def test_a_long_search_over_long_texts_marks_a_bounded_number_of_words(session):
    # FTS5's snippet work grows with the product of the places each query word occurs:
    # "alpha " * 50 took a minute over 100 kB texts, a pasted paragraph many minutes.
    words = [f"w{i}" for i in range(10)]
    c = session.new_conversation()
    short = " ".join(words)
    long = " ".join(words * 2_000)  # 60 kB, every word 2,000 times
    nodes = session.append_turns(
        c.root_id, [Turn(role=Role.USER, text=short), Turn(role=Role.USER, text=long)]
    )
    query = " ".join(words * 20)  # repeated words count once
    hits = session.search(query, order="rank")
    assert len(hits) == 2 and hits == session.search(" ".join(words), order="rank")
    snippet = {h.node_id: h.snippet for h in hits}
    assert snippet[nodes[0].id].count("[") == 8  # the short text: eight words marked
    marked = snippet[nodes[1].id]  # the long one: the first word only
    assert "[w0]" in marked and marked.replace("[w0]", "").count("[") == 0


def test_search_in_an_unknown_conversation_is_not_found_rather_than_no_hits(session):
    ChatContext(session, engine=FakeEngine()).cursor().ask("hello there")
    with pytest.raises(NotFoundError, match=r"^no conversation 'nope' in this session; list"):
        session.search("hello", conversation_id="nope")
    with pytest.raises(ContextError, match=r"^raw is True or False, not 'no'$"):
        session.search("hello", raw="no")
    assert len(session.search("hello", raw=False)) == 2


def test_search_finds_a_word_inside_a_run_of_cjk_characters(session):
    """FTS5's unicode61 tokenizer keeps a run without spaces as one token: 日本語 found
    nothing in 日本語のテキスト, nor 中文 in a Chinese sentence."""
    ctx = ChatContext(session, engine=FakeEngine())
    ja = ctx.cursor(title="ja")
    ja.ask("日本語のテキストを読む")
    zh = ctx.cursor(title="zh")
    zh.ask("我喜欢中文和PYTHON")
    ko = ctx.cursor(title="ko")
    ko.ask("한국어를 배웁니다")
    ctx.cursor(title="en").ask("hello world")

    def found(text, **kw):
        return [(h.title, h.role.value, h.snippet) for h in session.search(text, **kw)]

    assert found("日本語") == [
        ("ja", "assistant", "echo: [日本語]のテキストを読む"),
        ("ja", "user", "[日本語]のテキストを読む"),
    ]
    assert [t for t, r, _ in found("テキスト") if r == "user"] == ["ja"]  # inside the run
    assert found("中文", conversation_id=zh.conversation_id)[1] == (
        "zh",
        "user",
        "我喜欢[中文]和PYTHON",
    )
    assert [t for t, r, _ in found("한국어") if r == "user"] == ["ko"]
    # With such a word, every word is a substring: the Latin one glued to the Han text too.
    assert found("python 中文")[1] == ("zh", "user", "我喜欢[中文]和[PYTHON]")
    assert found("日本語、テキスト")[1][2] == "[日本語]の[テキスト]を読む"  # punctuation splits
    assert found("中文 nothing") == [] and found("日本語 中文") == []  # all words must match
    assert found("中文", order="rank") == found("中文")  # no bm25 score: newest first
    assert found("日本語", raw=True) == []  # raw queries: the word index only, as documented
    assert [t for t, r, _ in found("world") if r == "user"] == ["en"]  # Latin: unchanged


def test_a_cjk_snippet_is_cut_around_the_first_match(session):
    c = session.new_conversation()
    text = "あ" * 100 + "東京タワー" + "い" * 100 + "東京"
    session.append_turns(c.root_id, [Turn(role=Role.USER, text=text)])
    (hit,) = session.search("東京")
    assert hit.snippet == "…" + "あ" * 24 + "[東京]タワー" + "い" * 21 + "…"


def test_latin_text_adds_nothing_to_the_substring_index(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    cur = ChatContext(session, engine=FakeEngine()).cursor()
    cur.ask("plain English text, nothing else")
    cur.ask("混ぜた text")
    session.close()
    conn = sqlean.connect(str(path))
    rows = conn.execute("SELECT text FROM search_cjk ORDER BY rowid").fetchall()
    conn.close()
    assert rows == [("混ぜた text",), ("echo: 混ぜた text",)]


def test_a_store_at_the_previous_schema_finds_cjk_words_after_opening(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlean.connect(str(path), isolation_level=None)
    migrate(conn, upto=NAMES.index("0005_substring_search"))
    conn.close()
    session = Session.open(path)  # stands in for the previous version: ...
    c = session.new_conversation(title="old")
    nodes = session.append_turns(
        c.root_id,
        [Turn(role=Role.USER, text="日本語のテキスト"), Turn(role=Role.USER, text="the walrus")],
    )
    session.close()
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute("DROP TABLE search_cjk")  # ... which had no substring index
    conn.execute("DELETE FROM migrations WHERE name = '0005_substring_search'")
    assert conn.execute("SELECT count(*) FROM search").fetchone()[0] == 2
    conn.close()
    session = Session.open(path)
    assert [h.node_id for h in session.search("テキスト")] == [nodes[0].id]
    assert [h.node_id for h in session.search("walrus")] == [nodes[1].id]
    assert session.verify().ok
    cur = ChatContext(session, engine=FakeEngine()).cursor(c.id)
    cur.ask("新しい質問")
    assert [h.role for h in session.search("質問")] == [Role.ASSISTANT, Role.USER]
    session.close()


def test_search_finds_tool_results_and_replies(session):
    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("x", {})]))
    cur = ChatContext(session, engine=engine).cursor()
    cur.ask("question")
    roles = {h.role for h in session.search("toolbox")}  # the "no toolbox" error result
    assert roles == {Role.TOOL}
    cur.ask("next")
    assert [h.role for h in session.search("echo")] == [Role.ASSISTANT]


def test_json_export_import_round_trip(tmp_path, session):
    build_tree(session)
    out = tmp_path / "export.json"
    session.export_json(out)
    data = json.loads(out.read_text())
    assert data["format"] == "mp13.session" and data["version"] == 4  # 4: tool tracebacks
    copy = Session.import_json(out)
    assert session_data(copy) == session_data(session)
    conv = session.conversations()[0]
    leaf = session.leaf(conv.root_id).id
    assert copy.messages(leaf) == session.messages(leaf)
    assert copy.settings_at(leaf) == session.settings_at(leaf)
    with pytest.raises(ImportConflictError, match="already exists"):
        Session.import_json(out, into=copy)
    Session.import_json(out, into=copy, new_ids=True)
    convs = copy.conversations()
    assert len(convs) == 2 and convs[0].id != convs[1].id
    copied = copy.leaf(convs[1].root_id).id
    assert copy.messages(copied) == session.messages(leaf)
    into_file = Session.import_json(out, into=tmp_path / "imported.db")
    assert session_data(into_file) == session_data(session)
    into_file.close()


def test_import_rejects_foreign_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(SerializationError, match="not an mp13 session export"):
        Session.import_json(bad)
    bad.write_text('{"format": "mp13.session", "version": 1, "conversations": [{"info": 3}]}')
    with pytest.raises(SerializationError):
        Session.import_json(bad)


def test_unknown_ids_raise_not_found(session):
    with pytest.raises(NotFoundError, match="no node"):
        session.node("nope")
    with pytest.raises(NotFoundError, match="no conversation"):
        session.conversation("nope")


def test_a_migration_that_fails_is_rolled_back_and_named(tmp_path):
    path = tmp_path / "half.db"
    conn = sqlean.connect(str(path), isolation_level=None)
    migrate(conn, upto=2)
    conn.execute("CREATE TABLE positions (x)")  # in the way of the next migration
    conn.close()
    with pytest.raises(StoreError) as err:
        Session.open(path)
    assert str(err.value) == (
        f"{str(path)!r} is not a usable mp13 session file (table positions already exists); "
        "pick another file name"
    )
    conn = sqlean.connect(str(path))
    assert [r[0] for r in conn.execute("SELECT name FROM migrations")] == NAMES[:2]
    conn.close()


def test_tree_edits_that_cannot_apply_are_refused_or_harmless(session):
    cur = ChatContext(session, engine=FakeEngine()).cursor()
    cur.ask("q")
    root, user, reply = session.path(cur.node_id)
    with pytest.raises(CursorError) as err:
        session.add_commands(user.id, [Command(kind=CommandKind.LOG, text="x")])
    assert str(err.value) == (
        f"node {user.id} already has children; record the commands on a new placeholder "
        "child instead (cursors do this for you)"
    )
    assert session.set_main_line(root.id) == root  # a root has no siblings
    for text in ("a", "b"):
        cur.fork().ask(text)
    first, second = session.children(reply.id)
    session.set_main_line(first.id)
    session.set_main_line(second.id)  # one main line among siblings
    assert not session.node(first.id).main_line and session.node(second.id).main_line
    with pytest.raises(ContextError) as err:
        session.search("q", order="best")
    assert str(err.value) == "search order must be 'recent' or 'rank', got 'best'"


def test_a_damaged_file_resumes_at_the_root_and_names_a_missing_state(tmp_path):
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        cur = ChatContext(session, engine=FakeEngine()).cursor()
        cur.ask("hello")
        cid, root = cur.conversation_id, session.path(cur.node_id)[0].id
        head = cur.node_id
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute("UPDATE positions SET node_id = 'gone'")
    conn.execute("DELETE FROM states WHERE id = (SELECT state_id FROM nodes WHERE id = ?)", (head,))
    conn.close()
    with Session.open(path) as session:
        assert ChatContext(session, engine=FakeEngine()).cursor(cid).node_id == root
        with pytest.raises(StoreError, match=r"state \d+ is missing from .*; the file is damaged"):
            session.settings_at(head)


def test_a_session_path_sqlite_cannot_open_says_why(tmp_path):
    # SQLite's own text was "unable to open database file; check the path".
    with pytest.raises(StoreError, match=r"it is a folder; give a file name in it, e\.g\. "):
        Session.open(tmp_path)
    with pytest.raises(StoreError, match=r"its folder .*nodir' does not exist; create it first"):
        Session.open(tmp_path / "nodir" / "chats.db")
    assert not (tmp_path / "nodir").exists()  # nothing was created
