# SPDX-License-Identifier: MIT
"""The SQLite store (through ``sqlean.py``): opening files, incremental saves, search, checks.

Invariants:

- The schema is built by the append-only named migrations of ``_migrations``;
  opening a writable file applies the missing ones.
- Every mutation (append a node, append a command, change flags, rename a
  conversation, move a saved position) is one short transaction that writes only
  the rows it changes; the session is never rewritten.
- Files use WAL, so several connections can read while one writes.
  ``synchronous=NORMAL``: a committed turn survives a crash of the process; a
  power cut may lose the last few.
- A file is inspected before anything is written to it: a SQLite file that is
  not an mp13 session (tables but no ``migrations`` table), or one with
  migrations this version does not know, is refused while it is still byte for
  byte as it was (switching to WAL rewrites the header, so it comes after).
- ``read_only=True`` opens with SQLite's ``mode=ro`` and writes nothing: no
  migration, no WAL switch, every write raises ``ReadOnlyError``. On read-only
  media (the file or its folder cannot be written, or carries no write
  permission bit) it opens the file as ``immutable``, so SQLite creates no
  ``-wal``/``-shm`` files next to it; a ``-wal`` file left there by a crash is
  then not read.
- All SQL runs under one lock per store, so a session can be used from several
  threads (the sync API runs coroutines on a helper thread).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3 as _std_sqlite3
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import sqlean

from mp13_context._errors import ReadOnlyError, StoreError
from mp13_context._integrity import IntegrityProblem, IntegrityReport, VerifyRow, verify_rows
from mp13_context._migrations import index_turn, migrate, missing_migrations
from mp13_context._text import substring_snippet

# Errors of sqlean and the standard library share names but not classes.
# UnicodeEncodeError: SQLite takes UTF-8 only, and a lone surrogate in an id or a file
# name the caller gave cannot be encoded (stored text is scrubbed before it gets here).
_SQL_ERRORS = (sqlean.Error, _std_sqlite3.Error, UnicodeEncodeError)
#: A result row; sqlean is untyped, so its columns are whatever SQLite stored.
Row = tuple[Any, ...]


@attrs.define
class NodeRow:
    """A node row as stored: JSON columns still encoded."""

    seq: int
    id: str
    conversation_id: str
    parent_id: str | None
    kind: str
    depth: int
    turn: str | None
    commands: str | None
    archived: int
    main_line: int
    label: str
    created_at: float
    state_id: int
    hash: str


#: The columns of ``nodes``, in ``NodeRow``'s order (an insert sets all but ``seq``).
_NODE_COLUMNS = ", ".join(f.name for f in attrs.fields(NodeRow))
_INSERTED = [f.name for f in attrs.fields(NodeRow) if f.name != "seq"]


def _in_memory(path: str) -> bool:
    return path == ":memory:" or path.startswith("file::memory:")


def _read_only_media(path: str) -> bool:
    """Whether SQLite could not create ``-wal``/``-shm`` files next to ``path``.

    The write permission bits count too, not only ``os.access``: a file or folder
    marked read-only is treated as read-only media even for a user (root) whom
    the permissions do not stop.
    """
    for item in (path, os.path.dirname(os.path.abspath(path))):
        if not os.access(item, os.W_OK) or not os.stat(item).st_mode & 0o222:
            return True
    return False


def _open(path: str, *, read_only: bool) -> Any:
    """A bare connection (autocommit; transactions are explicit) that has written nothing."""
    kw: dict[str, Any] = {"isolation_level": None, "check_same_thread": False, "timeout": 10.0}
    if not read_only:
        return sqlean.connect(path, **kw)
    if _in_memory(path):
        raise StoreError("read_only=True needs a session file; an in-memory session is empty")
    if not os.path.isfile(path):
        raise StoreError(f"no session file at {path!r}; read_only=True opens existing files only")
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    if not _read_only_media(path):
        conn = sqlean.connect(uri, uri=True, **kw)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except _SQL_ERRORS:  # e.g. a WAL file whose -shm cannot be created: open immutable
            conn.close()
    return sqlean.connect(f"{uri}&immutable=1", uri=True, **kw)


def _configure(conn: Any, path: str) -> None:
    if not _in_memory(path):
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # Checkpoint the WAL less often (~40 MB): pages that many small transactions
    # touch again and again are then copied into the database once.
    conn.execute("PRAGMA wal_autocheckpoint=10000")


def _of_conversation(cid: str | None) -> tuple[str, tuple[str, ...]]:
    """``WHERE`` (on ``nodes n``) and its arguments for one conversation, or for all."""
    return ("WHERE n.conversation_id = ?", (cid,)) if cid is not None else ("", ())


def _why(path: str, exc: BaseException) -> str:
    """What to do about a file SQLite could not open (its own text says only "unable")."""
    if os.path.isdir(path):
        example = os.path.join(path, "chats.db")
        return f"it is a folder; give a file name in it, e.g. {example!r}"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"its folder {folder!r} does not exist; create it first or pick another path"
    if not os.path.exists(path) and not os.access(folder, os.W_OK):
        return f"its folder {folder!r} cannot be written; pick a folder you can write to"
    return f"{exc}; check the path and its permissions"


#: A longer text's search snippet marks one word of the query (see ``Store.search``).
_SNIPPET_TEXT = 10_000
#: SQLite's largest integer.
_MAX_INT = 2**63 - 1

#: What to do about a SQLite failure, by words of SQLite's message (it says only what).
_HINTS = (
    (
        "locked",
        "another connection is writing to the file (another program, or a second "
        "Session.open of it) and kept it locked for over 10 s; nothing was changed: let it "
        "finish or close it, then try again",
    ),
    (
        "readonly",
        "the file or its folder cannot be written: fix their permissions, or open it "
        "with read_only=True to read it",
    ),
    (
        "malformed",
        "the file is damaged: restore it from a backup (the sqlite3 command-line tool's "
        "'.recover' salvages what it can of it into a new file)",
    ),
    (
        "disk is full",
        "make room on the disk (or raise the folder's quota), then try again; what was "
        "saved before is kept",
    ),
    (
        "not a database",
        "it is not an SQLite file, or its first page is damaged: pick another file name, "
        "or restore the session from a backup",
    ),
)


def _hint(exc: BaseException) -> str:
    """SQLite's message, and what to do about it where that is known."""
    text = str(exc)
    hint = next((h for words, h in _HINTS if words in text.lower()), None)
    return f"{text}; {hint}" if hint else text


_READ_ONLY = "this session was opened with read_only=True; open it without read_only to change it"


def remove_database(path: str) -> None:
    """Delete the SQLite file ``path`` and its journal/WAL side files (those that exist):
    only for a file this process just created and must not leave behind."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.remove(path + suffix)


def _draft_name(path: str) -> str:
    """A new file name of our own beside ``path`` (never a user's ``NAME.tmp``)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")


def _same_file(a: str, b: str) -> bool:
    """Whether both names lead to one file (False where either leads nowhere, such as
    a dangling link, which a copy may replace)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_replaceable(own: str, path: str) -> None:
    """``StoreError`` unless ``copy_to(path, overwrite=True)`` may replace ``path``.

    Not a folder, nor this session's own file; and no journal or WAL file next to
    it: SQLite would apply that to the copy when it is opened (damaging it), and a
    ``-wal`` file means the old file may be open somewhere right now.
    """
    if os.path.isdir(path):
        raise StoreError(f"cannot copy the session into {path!r}: it is a folder; give a file name")
    if not _in_memory(own) and _same_file(own, path):
        raise StoreError(f"{path!r} is this session's own file; a copy goes into another file")
    side = [path + s for s in ("-journal", "-wal", "-shm") if os.path.lexists(path + s)]
    if side:
        raise StoreError(
            f"{path!r} cannot be replaced: {side[0]!r} lies next to it, so it may be open in "
            "another program or was not closed cleanly (SQLite would apply that file to the "
            "copy); close what has it open, or pick a new file name (nothing was changed)"
        )


class Store:
    """SQL for one session file. Every public method is one transaction or one read."""

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.closed = False
        self.lock = threading.RLock()
        try:
            self.conn = _open(path, read_only=read_only)
        except _SQL_ERRORS as exc:
            raise StoreError(f"cannot open session file {path!r}: {_why(path, exc)}") from exc
        try:
            # Inspect first, change later: a foreign file is refused untouched.
            missing = missing_migrations(self.conn)
            if read_only and missing:
                raise ReadOnlyError(
                    f"{path!r} needs schema migrations {missing} that a read-only open cannot "
                    "apply; open it once without read_only=True (on a copy, if it must not change)"
                )
            if not read_only:
                _configure(self.conn, path)
                migrate(self.conn)
        except _SQL_ERRORS as exc:
            self.conn.close()
            # The WAL switch needs side files beside an existing file.
            if not read_only and os.path.isfile(path) and _read_only_media(path):
                raise StoreError(
                    f"cannot open session file {path!r} for changes: it or its folder "
                    f"cannot be written ({exc}), and a session writes -wal and -shm files "
                    "beside its file; open it with read_only=True to read it, or copy it "
                    "somewhere writable (it was not changed)"
                ) from exc
            if any(words in str(exc).lower() for words, _ in _HINTS):  # what to do is known
                raise StoreError(
                    f"cannot open session file {path!r} (it was not changed): {_hint(exc)}"
                ) from exc
            raise StoreError(
                f"{path!r} is not a usable mp13 session file ({exc}); pick another file name"
            ) from exc
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.conn.close()

    def require_open(self) -> None:
        """``StoreError`` once closed (also for reads a caller would serve from a cache)."""
        if self.closed:
            raise StoreError(
                f"session {self.path!r} is closed; open it again with Session.open(path)"
            )

    def copy_to(self, path: str, *, overwrite: bool = False) -> None:
        """Copy the whole database into the file ``path`` (SQLite's online backup): a new
        file, or with ``overwrite`` one that replaces ``path`` only once it is whole."""
        # First: sqlean crashes the interpreter when a closed connection is backed up.
        self.require_open()
        if _in_memory(path):
            raise StoreError(f"a copy goes into a file: give a file name, not {path!r}")
        if os.path.lexists(path) and not overwrite:
            raise StoreError(
                f"{path!r} exists; a copy never overwrites a file: pick a new file name, or "
                "pass overwrite=True to replace it (the session itself is unchanged)"
            )
        if overwrite:
            _check_replaceable(self.path, path)
        # With overwrite, the copy is written beside the target and renamed over it, so
        # the old file stays whole until the copy is.
        draft = _draft_name(path) if overwrite else path
        with self.lock:
            created = False
            try:
                target = sqlean.connect(draft)
                created = True
                try:
                    self.conn.backup(target)
                finally:
                    target.close()
                if overwrite:
                    os.replace(draft, path)
            except (*_SQL_ERRORS, OSError) as exc:
                if created:  # a half-written copy would block the retry: it is ours, remove it
                    remove_database(draft)
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise StoreError(
                    f"copying the session into {path!r} failed: {reason}; check that its "
                    "folder exists and can be written, and that the disk has room (the "
                    "session itself is unchanged)"
                ) from exc

    @contextlib.contextmanager
    def tx(self) -> Iterator[Any]:
        """One write transaction; SQLite errors become ``StoreError``."""
        if self.read_only:
            self.require_open()  # closed comes first: "open it without read_only" needs that
            raise ReadOnlyError(_READ_ONLY)
        with self.lock:
            self.require_open()
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.conn
                except BaseException:
                    self.conn.execute("ROLLBACK")
                    raise
                self.conn.execute("COMMIT")
            except _SQL_ERRORS as exc:
                raise StoreError(f"saving to {self.path!r} failed: {_hint(exc)}") from exc

    def read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]:
        with self.lock:
            self.require_open()
            try:
                rows: list[Row] = self.conn.execute(sql, args).fetchall()
                return rows
            except _SQL_ERRORS as exc:
                raise StoreError(f"reading {self.path!r} failed: {_hint(exc)}") from exc

    # --- checks -----------------------------------------------------------------------

    def quick_check(self, max_errors: int = 100) -> IntegrityReport:
        """SQLite's ``quick_check``: damaged pages and b-trees, as problems (raises only
        ``StoreError`` when closed: that is no finding about the file)."""
        found: list[str] = []
        pages = 0
        with self.lock:
            self.require_open()
            try:
                pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
                # Row by row: on some damage SQLite reports findings, then stops with an error.
                for (line,) in self.conn.execute(f"PRAGMA quick_check({int(max_errors)})"):
                    if line != "ok":
                        found.append(line)
            except _SQL_ERRORS as exc:
                found.append(f"SQLite stopped checking {self.path!r}: {exc}")
        problems = tuple(IntegrityProblem(message=m) for m in found)
        return IntegrityReport(checked=pages, problems=problems)

    def verify(self, conversation_id: str | None = None) -> IntegrityReport:
        """Every node's hash against its content (see ``_integrity.verify_rows``)."""
        where, args = _of_conversation(conversation_id)
        sql = (
            "SELECT n.id, n.conversation_id, n.parent_id, n.kind, n.turn, n.commands, n.label, "
            "n.created_at, n.hash, p.hash, p.conversation_id, c.root_id FROM nodes n "
            "LEFT JOIN nodes p ON p.id = n.parent_id "
            f"LEFT JOIN conversations c ON c.id = n.conversation_id {where} ORDER BY n.seq"
        )
        lost = self.read(
            "SELECT c.id, c.root_id FROM conversations c LEFT JOIN nodes n ON n.id = c.root_id "
            "WHERE n.id IS NULL" + (" AND c.id = ?" if args else ""),
            args,
        )
        report = verify_rows(VerifyRow(*r) for r in self.read(sql, args))
        missing = tuple(
            IntegrityProblem(
                message=f"conversation {cid}'s root node {root} does not exist",
                node_id=root,
                conversation_id=cid,
            )
            for cid, root in lost
        )
        return attrs.evolve(report, problems=missing + report.problems)

    def settings_rows(self, conversation_id: str | None = None) -> list[tuple[Any, ...]]:
        """Each node's id, conversation, parent, commands JSON and stored settings JSON
        (``None`` when its ``state_id`` names no row), parents first: for
        ``_settings_check``."""
        where, args = _of_conversation(conversation_id)
        return self.read(
            "SELECT n.id, n.conversation_id, n.parent_id, n.commands, s.data FROM nodes n "
            f"LEFT JOIN states s ON s.id = n.state_id {where} ORDER BY n.seq",
            args,
        )

    # --- writes -----------------------------------------------------------------------

    def intern_state(self, data: str) -> int:
        rows = self.read("SELECT id FROM states WHERE data = ?", (data,))
        if rows:
            return int(rows[0][0])
        with self.tx() as conn:
            return self.intern_in(conn, data)

    @staticmethod
    def intern_in(conn: Any, data: str) -> int:
        """``intern_state`` inside the caller's transaction."""
        row = conn.execute("SELECT id FROM states WHERE data = ?", (data,)).fetchone()
        if row:
            return int(row[0])
        return int(conn.execute("INSERT INTO states (data) VALUES (?)", (data,)).lastrowid)

    @staticmethod
    def existing(conn: Any, table: str, ids: list[str]) -> list[str]:
        """Which of ``ids`` are already in ``table`` (``nodes`` or ``conversations``)."""
        found: list[str] = []
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ", ".join("?" * len(part))
            rows = conn.execute(f"SELECT id FROM {table} WHERE id IN ({marks})", part)
            found += [r[0] for r in rows]
        return found

    def insert_conversation_in(
        self, conn: Any, cid: str, title: str, root: dict[str, Any], created_at: float
    ) -> int:
        """Insert a conversation and its root node inside the caller's transaction; return
        the root's seq."""
        conn.execute(
            "INSERT INTO conversations (id, title, root_id, head_id, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (cid, title, root["id"], root["id"], created_at),
        )
        return self.insert_node_in(conn, root)

    @staticmethod
    def insert_node_in(conn: Any, row: dict[str, Any]) -> int:
        """Append a node, and index its turn for search, inside the caller's transaction;
        return its seq."""
        columns, values = ", ".join(_INSERTED), ", ".join(f":{c}" for c in _INSERTED)
        seq = conn.execute(f"INSERT INTO nodes ({columns}) VALUES ({values})", row).lastrowid
        index_turn(conn, row["id"], row["conversation_id"], row["turn"])
        return int(seq)

    def set_commands(self, node_id: str, commands: str, state_id: int, digest: str) -> None:
        with self.tx() as conn:
            conn.execute(
                "UPDATE nodes SET commands = ?, state_id = ?, hash = ? WHERE id = ?",
                (commands, state_id, digest, node_id),
            )

    def set_flags(self, node_id: str, **flags: Any) -> None:
        sets = ", ".join(f"{name} = :{name}" for name in flags)
        with self.tx() as conn:
            conn.execute(f"UPDATE nodes SET {sets} WHERE id = :id", {**flags, "id": node_id})

    def set_main_line(self, node_id: str, sibling_ids: list[str]) -> None:
        """Make ``node_id`` the main line among its siblings (one transaction)."""
        with self.tx() as conn:
            conn.executemany(
                "UPDATE nodes SET main_line = 0 WHERE id = ?", [(s,) for s in sibling_ids]
            )
            conn.execute("UPDATE nodes SET main_line = 1, archived = 0 WHERE id = ?", (node_id,))

    def set_title(self, cid: str, title: str) -> None:
        with self.tx() as conn:
            conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, cid))

    def save_position(self, scope: str, cid: str, node_id: str) -> None:
        with self.tx() as conn:
            self.save_position_in(conn, scope, cid, node_id)

    @staticmethod
    def save_position_in(conn: Any, scope: str, cid: str, node_id: str) -> None:
        """Save (or move) ``scope``'s position in a conversation inside the caller's
        transaction."""
        conn.execute(
            "INSERT INTO positions (scope, conversation_id, node_id, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (scope, conversation_id) "
            "DO UPDATE SET node_id = excluded.node_id, updated_at = excluded.updated_at",
            (scope, cid, node_id, time.time()),
        )

    # --- reads ------------------------------------------------------------------------

    def _nodes(self, where: str, value: str) -> list[NodeRow]:
        """The node rows whose column ``where`` holds ``value``, in creation order."""
        sql = f"SELECT {_NODE_COLUMNS} FROM nodes WHERE {where} = ? ORDER BY seq"
        return [NodeRow(*r) for r in self.read(sql, (value,))]

    def node(self, node_id: str) -> NodeRow | None:
        rows = self._nodes("id", node_id)
        return rows[0] if rows else None

    def children(self, node_id: str) -> list[NodeRow]:
        return self._nodes("parent_id", node_id)

    def leaf(self, node_id: str) -> str:
        """Down the main line from ``node_id``: at each step the main-line child, else the
        newest child that is not archived (one recursive query, any depth)."""
        rows = self.read(
            "WITH RECURSIVE walk(id, d) AS (SELECT ?, 0 UNION ALL "
            "SELECT (SELECT c.id FROM nodes c WHERE c.parent_id = walk.id AND c.archived = 0 "
            "ORDER BY c.main_line DESC, c.seq DESC LIMIT 1), d + 1 "
            "FROM walk WHERE walk.id IS NOT NULL) "
            "SELECT id FROM walk WHERE id IS NOT NULL ORDER BY d DESC LIMIT 1",
            (node_id,),
        )
        return str(rows[0][0])

    def has_children(self, node_id: str) -> bool:
        return bool(self.read("SELECT 1 FROM nodes WHERE parent_id = ? LIMIT 1", (node_id,)))

    def path_rows(self, node_id: str) -> list[NodeRow]:
        """The rows from the root down to ``node_id`` (one recursive query)."""
        rows = self.read(
            "WITH RECURSIVE p(id, d) AS (SELECT ?, 0 UNION ALL "
            "SELECT n.parent_id, p.d + 1 FROM nodes n JOIN p ON n.id = p.id "
            "WHERE n.parent_id IS NOT NULL) "
            f"SELECT {', '.join('n.' + c.strip() for c in _NODE_COLUMNS.split(','))} "
            "FROM p JOIN nodes n ON n.id = p.id ORDER BY p.d DESC",
            (node_id,),
        )
        return [NodeRow(*r) for r in rows]

    def conversation_nodes(self, cid: str) -> list[NodeRow]:
        return self._nodes("conversation_id", cid)

    def state(self, state_id: int) -> str:
        rows = self.read("SELECT data FROM states WHERE id = ?", (state_id,))
        if not rows:
            raise StoreError(f"state {state_id} is missing from {self.path!r}; the file is damaged")
        return str(rows[0][0])

    # The head (newest node) comes from the (conversation_id, seq) index rather than a
    # column updated on every save: one page less to write per turn.
    _CONVERSATION = (
        "SELECT c.id, c.root_id, c.title, (SELECT n.id FROM nodes n WHERE "
        "n.conversation_id = c.id ORDER BY n.seq DESC LIMIT 1), c.created_at FROM conversations c"
    )

    def conversations(self) -> list[Row]:
        return self.read(f"{self._CONVERSATION} ORDER BY c.created_at, c.rowid")

    def conversation(self, cid: str) -> Row | None:
        rows = self.read(f"{self._CONVERSATION} WHERE c.id = ?", (cid,))
        return rows[0] if rows else None

    def position(self, scope: str, cid: str) -> str | None:
        rows = self.read(
            "SELECT node_id FROM positions WHERE scope = ? AND conversation_id = ?", (scope, cid)
        )
        return rows[0][0] if rows else None

    def positions(self, cid: str) -> list[Row]:
        """``(scope, node_id)`` of every position saved in a conversation, by scope."""
        return self.read(
            "SELECT scope, node_id FROM positions WHERE conversation_id = ? ORDER BY scope",
            (cid,),
        )

    def search(
        self,
        query: str,
        limit: int,
        cid: str | None,
        by_rank: bool,
        marks: tuple[str, str],
        pieces: Sequence[str] = (),
    ) -> list[Row]:
        """``(conversation_id, node_id, role, snippet, rank)`` of the hits of ``query``
        (no word-index condition when it is "") that hold every one of ``pieces``.

        ``pieces`` (words of scripts written without spaces, ``_text.unspaced_pieces``)
        are found as substrings in the trigram index ``search_cjk``, which holds every
        text that has such characters; a hit's snippet then marks them
        (``substring_snippet``), and with no ``query`` there is no rank: newest first.

        The snippets are made for the hits only, from ``marks``: two queries every hit
        also matches (a few of its words OR-ed, and one word), the second for texts
        longer than ``_SNIPPET_TEXT``. Where the first is ``query`` itself, a short
        text's snippet comes with its hit, in one statement. FTS5's snippet cost grows
        with the product of the places each marked word occurs, and ranking would
        otherwise make one for every match: a pasted paragraph searched over 100 kB
        texts took minutes.
        """
        conditions: list[str] = ["search MATCH ?"] if query else []
        args: list[Any] = [query] if query else []
        if pieces:
            # LIKE on a trigram table uses its index for a piece of 3 characters or more
            # and scans that table (only texts with such characters) for a shorter one.
            likes = " AND ".join("text LIKE ?" for _ in pieces)
            conditions.append(f"rowid IN (SELECT rowid FROM search_cjk WHERE {likes})")
            args += [f"%{p}%" for p in pieces]  # letters, marks, digits: no LIKE escapes
        if cid:
            conditions.append("conversation_id = ?")
            args.append(cid)
        # SQLite's integers are 64-bit: a larger limit (10**20, "all of them") means no limit.
        args.append(min(limit, _MAX_INT))
        # Newest first walks the index backwards and stops at ``limit``; ranking must
        # score every match, which is slow for common words in a big session.
        order = "rank" if by_rank and query else "rowid DESC"
        # When the query marks what the snippets mark (a few plain words, or a raw query),
        # a short text's snippet is made in the same statement, for the rows it returns:
        # a second statement per batch would MATCH again. Longer texts' come below.
        inline = bool(query) and not pieces and marks[0] == query
        snippet = (
            f"CASE WHEN length(text) > {_SNIPPET_TEXT} THEN NULL "
            "ELSE snippet(search, 0, '[', ']', '…', 12) END"
            if inline
            else "NULL"
        )
        rows = self.read(
            f"SELECT rowid, length(text), conversation_id, node_id, role, "
            f"{'rank' if query else '0'}, {snippet} FROM search "
            f"WHERE {' AND '.join(conditions)} ORDER BY {order} LIMIT ?",
            tuple(args),
        )
        hits = [row[:-1] for row in rows]
        if pieces:
            return self._substring_hits(hits, pieces)
        snippets: dict[int, str] = {row[0]: row[-1] for row in rows if row[-1] is not None}
        for long, mark in enumerate(marks):
            rowids = [
                r[0] for r in hits if (r[1] > _SNIPPET_TEXT) == bool(long) and r[0] not in snippets
            ]
            for i in range(0, len(rowids), 500):
                part = rowids[i : i + 500]
                snippets.update(
                    self.read(
                        "SELECT rowid, snippet(search, 0, '[', ']', '…', 12) FROM search "
                        f"WHERE search MATCH ? AND rowid IN ({', '.join('?' * len(part))})",
                        (mark, *part),
                    )
                )
        return [(*hit, snippets.get(rowid, ""), rank) for rowid, _, *hit, rank in hits]

    def _substring_hits(self, hits: list[Row], pieces: Sequence[str]) -> list[Row]:
        """``search``'s rows for hits of a search with ``pieces``, snippets made here: the
        word index cannot mark part of a token."""
        texts: dict[int, str] = {}
        rowids = [r[0] for r in hits]
        for i in range(0, len(rowids), 500):
            part = rowids[i : i + 500]
            texts.update(
                self.read(
                    f"SELECT rowid, text FROM search WHERE rowid IN ({', '.join('?' * len(part))})",
                    tuple(part),
                )
            )
        return [
            (*hit, substring_snippet(texts.get(rowid, ""), pieces), rank)
            for rowid, _, *hit, rank in hits
        ]
