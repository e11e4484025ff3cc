# SPDX-License-Identifier: MIT
"""The session file's schema, as append-only named migrations.

Invariants:

- The schema is built by ``MIGRATIONS``, an append-only list of *named* steps.
  The ``migrations`` table records which names a file has; opening a file applies
  the missing ones in order, each in its own transaction. A file that has a
  migration this version does not know is refused (``SchemaError``) rather than
  misread. Never edit or reorder a released migration: append a new one.
- ``missing_migrations`` only reads: it is how a file is checked to be an mp13
  session (and not too new) before anything is written to it.
- A step that fills a new column for existing rows streams them and never
  recurses, so it works on a session of any size and any tree depth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from mp13_context._errors import SchemaError, StoreError
from mp13_context._integrity import row_hash
from mp13_context._text import unspaced

Migration = Callable[[Any], None]


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


def index_turn(
    conn: Any,
    node_id: str,
    conversation_id: str,
    turn_json: str | None,
    *,
    substrings: bool = True,
) -> None:
    """Add a stored turn's text, reasoning and tool results to the search index (the one
    definition of what is searchable: new nodes, imports and the migrations use it).

    A text with characters of a script written without spaces also goes to the
    substring index ``search_cjk`` under the same rowid (``_m0005_substring_search``);
    ``substrings=False`` only before that table exists."""
    if not turn_json:
        return
    turn = json.loads(turn_json)
    parts = [turn.get("text", ""), turn.get("reasoning", "")]
    parts += [r.get("content", "") for r in turn.get("tool_results", ())]
    text = "\n".join(p for p in parts if p)
    if text:
        rowid = conn.execute(
            "INSERT INTO search (text, role, conversation_id, node_id) VALUES (?, ?, ?, ?)",
            (text, turn["role"], conversation_id, node_id),
        ).lastrowid
        if substrings and unspaced(text):
            conn.execute("INSERT INTO search_cjk (rowid, text) VALUES (?, ?)", (rowid, text))


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
        # search_cjk comes later (0005), which indexes these rows from this table then.
        index_turn(conn, node_id, conversation_id, turn_json, substrings=False)


def _m0003_positions(conn: Any) -> None:
    conn.execute(
        "CREATE TABLE positions (scope TEXT NOT NULL, conversation_id TEXT NOT NULL, "
        "node_id TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (scope, conversation_id))"
    )


def _m0004_hashes(conn: Any) -> None:
    """Tamper evidence (see ``_integrity``): a hash per node, computed for existing nodes."""
    conn.execute("ALTER TABLE nodes ADD COLUMN hash TEXT NOT NULL DEFAULT ''")
    hashes: dict[str, str] = {}
    waiting: dict[str, list[tuple[Any, ...]]] = {}  # parent id -> rows stored before their parent
    updates = []
    rows = conn.execute(
        "SELECT id, parent_id, kind, turn, commands, label, created_at FROM nodes ORDER BY seq"
    )
    for row in rows:  # streamed: only ids and hashes are kept
        todo = [row]
        while todo:  # a node, then any rows that were waiting for it (no recursion: any depth)
            nid, parent_id, *content = todo.pop()
            parent_hash = "" if parent_id is None else hashes.get(parent_id)
            if parent_hash is None:
                waiting.setdefault(parent_id, []).append((nid, parent_id, *content))
                continue
            try:
                digest = row_hash(parent_hash, *content)
            except (ValueError, TypeError):
                continue  # unreadable row: left without a hash, so ``verify`` names it
            hashes[nid] = digest
            updates.append((digest, nid))
            todo.extend(waiting.pop(nid, ()))
    conn.executemany("UPDATE nodes SET hash = ? WHERE id = ?", updates)


def _m0005_substring_search(conn: Any) -> None:
    """Search inside runs of Han, kana, Hangul, Thai ... (``_text.unspaced``): the word
    index keeps such a run as one token, so ``日本語`` did not find ``日本語のテキスト``.

    A trigram index of the texts that have such characters, rowid for rowid with
    ``search``, which ``Session.search`` asks for those words. A text without them
    (Latin, Cyrillic ...) is not in it: such a session grows by the empty table's few
    pages (about 20 kB). A text with them is kept again with its trigrams: a session of
    such text takes about twice the space (measured: 2.9 MB more on 3.0 MB of random
    kana and Han, 400 turns of 600 characters).
    """
    conn.execute("CREATE VIRTUAL TABLE search_cjk USING fts5(text, tokenize='trigram')")
    conn.execute("INSERT INTO search_cjk (search_cjk, rank) VALUES ('automerge', 16)")
    conn.execute("INSERT INTO search_cjk (search_cjk, rank) VALUES ('crisismerge', 64)")
    rows = conn.execute("SELECT rowid, text FROM search")
    conn.executemany(
        "INSERT INTO search_cjk (rowid, text) VALUES (?, ?)",
        ((rowid, text) for rowid, text in rows if unspaced(text)),  # streamed: any size
    )


def _m0006_tool_tracebacks(conn: Any) -> None:
    """Tool results may carry a ``traceback`` in the turn JSON (``ToolResult.traceback``).

    Nothing to change in the tables: a stored result without one is read as before, and
    its hash is unchanged (the converter leaves out a field at its default). The step
    exists so that an older mp13 refuses a file that may hold tracebacks (an unknown
    migration) instead of misreading it: it would drop them on reading, and then its
    export of such a node would be refused as edited, as its hash covers the traceback.
    """
    del conn


#: The schema, as append-only named steps (see the module docstring).
MIGRATIONS: tuple[tuple[str, Migration], ...] = (
    ("0001_core", _m0001_core),
    ("0002_search", _m0002_search),
    ("0003_positions", _m0003_positions),
    ("0004_hashes", _m0004_hashes),
    ("0005_substring_search", _m0005_substring_search),
    ("0006_tool_tracebacks", _m0006_tool_tracebacks),
)


def missing_migrations(conn: Any) -> list[str]:
    """The migrations this file lacks, after checking (reads only) that it is ours.

    ``StoreError`` for a SQLite file of another program, ``SchemaError`` for a
    file with migrations this version does not know.
    """
    has = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='migrations'"
    ).fetchone()
    done = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")] if has else []
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
    return [n for n in known if n not in done]


def migrate(conn: Any, upto: int | None = None) -> list[str]:
    """Apply the missing migrations (the first ``upto`` only, for tests); return their names."""
    missing = missing_migrations(conn)
    done = [name for name, _ in MIGRATIONS if name not in missing]
    if not done:
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
