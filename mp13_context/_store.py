# SPDX-License-Identifier: MIT
"""The SQLite store (through ``sqlean.py``): schema migrations, incremental saves, search.

Invariants:

- The schema is built by ``MIGRATIONS``, an append-only list of *named* steps.
  The ``migrations`` table records which names a file has; opening a file applies
  the missing ones in order, each in its own transaction. A file that has a
  migration this version does not know is refused (``SchemaError``) rather than
  misread. Never edit or reorder a released migration: append a new one.
- Every mutation (append a node, append a command, change flags, rename a
  conversation, move a saved position) is one short transaction that writes only
  the rows it changes; the session is never rewritten.
- Files use WAL, so several connections can read while one writes.
  ``synchronous=NORMAL``: a committed turn survives a crash of the process; a
  power cut may lose the last few.
- All SQL runs under one lock per store, so a session can be used from several
  threads (the sync API runs coroutines on a helper thread).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3 as _std_sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import sqlean

from mp13_context._errors import SchemaError, StoreError

Migration = Callable[[Any], None]

# Errors of sqlean and the standard library share names but not classes.
_SQL_ERRORS = (sqlean.Error, _std_sqlite3.Error)


def _m0001_core(conn: Any) -> None:
    conn.execute(
        "CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '', "
        "root_id TEXT NOT NULL, head_id TEXT, created_at REAL NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE nodes (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
        "conversation_id TEXT NOT NULL, parent_id TEXT, kind TEXT NOT NULL, "
        "depth INTEGER NOT NULL, turn TEXT, commands TEXT, archived INTEGER NOT NULL DEFAULT 0, "
        "main_line INTEGER NOT NULL DEFAULT 0, label TEXT NOT NULL DEFAULT '', "
        "created_at REAL NOT NULL, state_id INTEGER NOT NULL)"
    )
    conn.execute("CREATE INDEX nodes_parent ON nodes (parent_id, seq)")
    conn.execute("CREATE INDEX nodes_conversation ON nodes (conversation_id, seq)")
    conn.execute("CREATE TABLE states (id INTEGER PRIMARY KEY, data TEXT NOT NULL UNIQUE)")


def search_text(turn_json: str | None) -> tuple[str, str] | None:
    """``(role, text)`` to index for a stored turn, or ``None`` when there is nothing."""
    if not turn_json:
        return None
    turn = json.loads(turn_json)
    parts = [turn.get("text", ""), turn.get("reasoning", "")]
    parts += [r.get("content", "") for r in turn.get("tool_results", ())]
    text = "\n".join(p for p in parts if p)
    return (turn["role"], text) if text else None


def _m0002_search(conn: Any) -> None:
    conn.execute(
        "CREATE VIRTUAL TABLE search USING fts5(text, role UNINDEXED, "
        "conversation_id UNINDEXED, node_id UNINDEXED)"
    )
    # Every save is its own transaction, so FTS5 gets one tiny segment per turn; merging
    # them less eagerly halves the cost of a save and keeps queries fast.
    conn.execute("INSERT INTO search (search, rank) VALUES ('automerge', 16)")
    conn.execute("INSERT INTO search (search, rank) VALUES ('crisismerge', 64)")
    # Files made before this migration already have turns: index them now.
    rows = conn.execute("SELECT id, conversation_id, turn FROM nodes WHERE turn IS NOT NULL")
    for node_id, conversation_id, turn_json in rows.fetchall():
        found = search_text(turn_json)
        if found is not None:
            conn.execute(
                "INSERT INTO search (text, role, conversation_id, node_id) VALUES (?, ?, ?, ?)",
                (found[1], found[0], conversation_id, node_id),
            )


def _m0003_positions(conn: Any) -> None:
    conn.execute(
        "CREATE TABLE positions (scope TEXT NOT NULL, conversation_id TEXT NOT NULL, "
        "node_id TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (scope, conversation_id))"
    )


#: The schema, as append-only named steps (see the module docstring).
MIGRATIONS: tuple[tuple[str, Migration], ...] = (
    ("0001_core", _m0001_core),
    ("0002_search", _m0002_search),
    ("0003_positions", _m0003_positions),
)


def applied_migrations(conn: Any) -> list[str]:
    has = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='migrations'"
    ).fetchone()
    if not has:
        return []
    return [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


def migrate(conn: Any, upto: int | None = None) -> list[str]:
    """Apply the missing migrations (the first ``upto`` only, for tests); return their names."""
    done = applied_migrations(conn)
    known = [name for name, _ in MIGRATIONS]
    unknown = [n for n in done if n not in known]
    if unknown:
        raise SchemaError(
            f"this session file has schema migrations {unknown} that this version of mp13 does "
            "not know; open it with a newer mp13, or export it to JSON from there"
        )
    if not done:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()
        if tables[0]:
            raise StoreError(
                "this SQLite file has tables but is not an mp13 session (no migrations table); "
                "pick a new file name for the session"
            )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations "
            "(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )
    applied = []
    for name, step in MIGRATIONS[:upto]:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            step(conn)
            conn.execute(
                "INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        applied.append(name)
    return applied


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


_NODE_COLUMNS = (
    "seq, id, conversation_id, parent_id, kind, depth, turn, commands, archived, main_line, "
    "label, created_at, state_id"
)


def connect(path: str) -> Any:
    """A connection with mp13's settings (autocommit; transactions are explicit)."""
    try:
        conn = sqlean.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        if path != ":memory:" and not path.startswith("file::memory:"):
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Checkpoint the WAL less often (~40 MB): pages that many small transactions
        # touch again and again are then copied into the database once.
        conn.execute("PRAGMA wal_autocheckpoint=10000")
        return conn
    except _SQL_ERRORS as exc:
        raise StoreError(f"cannot open session file {path!r}: {exc}; check the path") from exc


class Store:
    """SQL for one session file. Every public method is one transaction or one read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.conn = connect(path)
        try:
            migrate(self.conn)
        except _SQL_ERRORS as exc:
            self.conn.close()
            raise StoreError(
                f"{path!r} is not a usable mp13 session file ({exc}); pick another file name"
            ) from exc
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextlib.contextmanager
    def tx(self) -> Iterator[Any]:
        """One write transaction; SQLite errors become ``StoreError``."""
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.conn
                except BaseException:
                    self.conn.execute("ROLLBACK")
                    raise
                self.conn.execute("COMMIT")
            except _SQL_ERRORS as exc:
                raise StoreError(f"saving to {self.path!r} failed: {exc}") from exc

    def read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self.lock:
            try:
                return self.conn.execute(sql, args).fetchall()
            except _SQL_ERRORS as exc:
                raise StoreError(f"reading {self.path!r} failed: {exc}") from exc

    # --- writes -----------------------------------------------------------------------

    def intern_state(self, data: str) -> int:
        with self.tx() as conn:
            row = conn.execute("SELECT id FROM states WHERE data = ?", (data,)).fetchone()
            if row:
                return row[0]
            return conn.execute("INSERT INTO states (data) VALUES (?)", (data,)).lastrowid

    def insert_conversation(
        self, cid: str, title: str, root: dict[str, Any], created_at: float
    ) -> int:
        with self.tx() as conn:
            conn.execute(
                "INSERT INTO conversations (id, title, root_id, head_id, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (cid, title, root["id"], root["id"], created_at),
            )
            return self._insert_node(conn, root)

    def insert_node(self, row: dict[str, Any], search: tuple[str, str] | None = None) -> int:
        """Append a node and index ``search`` = ``(role, text)``; return its seq."""
        with self.tx() as conn:
            return self._insert_node(conn, row, search)

    def _insert_node(
        self, conn: Any, row: dict[str, Any], found: tuple[str, str] | None = None
    ) -> int:
        seq = conn.execute(
            "INSERT INTO nodes (id, conversation_id, parent_id, kind, depth, turn, commands, "
            "archived, main_line, label, created_at, state_id) "
            "VALUES (:id, :conversation_id, :parent_id, :kind, :depth, :turn, :commands, "
            ":archived, :main_line, :label, :created_at, :state_id)",
            row,
        ).lastrowid
        if found is not None:
            conn.execute(
                "INSERT INTO search (text, role, conversation_id, node_id) VALUES (?, ?, ?, ?)",
                (found[1], found[0], row["conversation_id"], row["id"]),
            )
        return seq

    def set_commands(self, node_id: str, commands: str, state_id: int) -> None:
        with self.tx() as conn:
            conn.execute(
                "UPDATE nodes SET commands = ?, state_id = ? WHERE id = ?",
                (commands, state_id, node_id),
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
            conn.execute(
                "INSERT INTO positions (scope, conversation_id, node_id, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (scope, conversation_id) "
                "DO UPDATE SET node_id = excluded.node_id, updated_at = excluded.updated_at",
                (scope, cid, node_id, time.time()),
            )

    # --- reads ------------------------------------------------------------------------

    def node(self, node_id: str) -> NodeRow | None:
        rows = self.read(f"SELECT {_NODE_COLUMNS} FROM nodes WHERE id = ?", (node_id,))
        return NodeRow(*rows[0]) if rows else None

    def children(self, node_id: str) -> list[NodeRow]:
        rows = self.read(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE parent_id = ? ORDER BY seq", (node_id,)
        )
        return [NodeRow(*r) for r in rows]

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
        return rows[0][0]

    def child_ids(self, node_id: str) -> list[str]:
        return [
            r[0]
            for r in self.read("SELECT id FROM nodes WHERE parent_id = ? ORDER BY seq", (node_id,))
        ]

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
        rows = self.read(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE conversation_id = ? ORDER BY seq", (cid,)
        )
        return [NodeRow(*r) for r in rows]

    def state(self, state_id: int) -> str:
        rows = self.read("SELECT data FROM states WHERE id = ?", (state_id,))
        if not rows:
            raise StoreError(f"state {state_id} is missing from {self.path!r}; the file is damaged")
        return rows[0][0]

    # The head (newest node) comes from the (conversation_id, seq) index rather than a
    # column updated on every save: one page less to write per turn.
    _CONVERSATION = (
        "SELECT c.id, c.root_id, c.title, (SELECT n.id FROM nodes n WHERE "
        "n.conversation_id = c.id ORDER BY n.seq DESC LIMIT 1), c.created_at FROM conversations c"
    )

    def conversations(self) -> list[tuple]:
        return self.read(f"{self._CONVERSATION} ORDER BY c.created_at, c.rowid")

    def conversation(self, cid: str) -> tuple | None:
        rows = self.read(f"{self._CONVERSATION} WHERE c.id = ?", (cid,))
        return rows[0] if rows else None

    def position(self, scope: str, cid: str) -> str | None:
        rows = self.read(
            "SELECT node_id FROM positions WHERE scope = ? AND conversation_id = ?", (scope, cid)
        )
        return rows[0][0] if rows else None

    def search(self, query: str, limit: int, cid: str | None, by_rank: bool) -> list[tuple]:
        where = "search MATCH ?" + (" AND conversation_id = ?" if cid else "")
        args: tuple = (query, cid, limit) if cid else (query, limit)
        # Newest first walks the index backwards and stops at ``limit``; ranking must
        # score every match, which is slow for common words in a big session.
        order = "rank" if by_rank else "rowid DESC"
        return self.read(
            "SELECT conversation_id, node_id, role, "
            "snippet(search, 0, '[', ']', '…', 12), rank "
            f"FROM search WHERE {where} ORDER BY {order} LIMIT ?",
            args,
        )
