# SPDX-License-Identifier: MIT
"""``Session``: conversations as trees, saved incrementally in SQLite.

A session is the tree API over one store. It appends nodes and commands, changes
flags, resolves the effective settings at any node, renders messages and searches.
Every mutation is saved at once in its own transaction; nothing needs a "save".

Invariants:

- Append-only tree (see ``_model``). Commands are only appended to nodes
  without children, so the effective settings of an existing node never change and
  can be computed once: each node stores the id of its (interned) settings, and
  ``settings_at`` is a lookup at any depth, also right after reopening a file.
- The session caches nodes and settings it has read. Nodes are immutable apart
  from flags and commands, which only this session changes; another process
  writing the same file is seen after ``refresh()``.
- Stored text is valid UTF-8: a lone surrogate in a turn, a command, a title or
  a label is stored as U+FFFD, and the node ``append`` returns already holds
  the stored text (see ``_text``), so what is read back, exported and sent to
  a model is the same.
- Every node carries a hash of its content and its parent's hash
  (``_integrity``); ``verify()`` finds nodes altered outside mp13 and
  ``check()`` runs SQLite's quick check for damaged pages.
- Imports are validated as a whole and written in one transaction, always as
  new conversations (``_import``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import attrs

from mp13_context._convert import unstructure
from mp13_context._errors import (
    ContextError,
    CursorError,
    NotFoundError,
    StoreError,
)
from mp13_context._export import export_session, read_document
from mp13_context._import import ImportLimits, ImportReport, plan_import, write_plans
from mp13_context._integrity import IntegrityReport
from mp13_context._interned import ScratchSettings, SettingsTable
from mp13_context._messages import render
from mp13_context._model import (
    Command,
    ConversationInfo,
    Node,
    NodeKind,
    Role,
    SavedPosition,
    SearchHit,
    Turn,
    new_id,
)
from mp13_context._rows import (
    check_new_commands,
    node_from_row,
    node_row,
    stored_commands,
    stored_turn,
)
from mp13_context._settings import EffectiveSettings, apply
from mp13_context._settings_check import settings_problems
from mp13_context._store import NodeRow, Store, remove_database
from mp13_context._text import fts_query, scrub, text_arg, unspaced, unspaced_pieces


class Session:
    """Conversations, each a tree of nodes, in one SQLite file (or ``":memory:"``)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._nodes: dict[str, Node] = {}
        self._settings_of: dict[str, int] = {}
        self._settings = SettingsTable(store)

    # --- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ":memory:", *, read_only: bool = False) -> Session:
        """Open (or create) a session file; ``":memory:"`` keeps it in memory.

        ``read_only=True`` opens an existing file without writing anything to it (no
        migration, no WAL switch, works on read-only media); every change raises
        ``ReadOnlyError`` and cursor positions are not saved.
        """
        return cls(Store(_file(path, "a session file"), read_only=read_only))

    @property
    def filename(self) -> str:
        """The SQLite file this session lives in (``":memory:"`` for none)."""
        return self._store.path

    @property
    def read_only(self) -> bool:
        """Whether it was opened with ``read_only=True`` (every change raises ``ReadOnlyError``)."""
        return self._store.read_only

    def close(self) -> None:
        """Close the file (idempotent); leaving a ``with Session.open(...)`` block does it."""
        self._store.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (every read or write then raises ``StoreError``)."""
        return self._store.closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save_copy(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write an exact copy of the session (same ids, hashes and saved positions) into
        the new file ``path``; ``StoreError`` if ``path`` exists, unless ``overwrite=True``.
        This session stays open.

        With ``overwrite=True`` the copy is written beside ``path`` and then takes its
        name, so the old file stays whole until the copy is. A file with a ``-journal``,
        ``-wal`` or ``-shm`` file next to it (open elsewhere, or not closed cleanly) is
        not replaced, nor this session's own file: ``StoreError``, nothing changed."""
        _check_flags(overwrite=overwrite)  # "no" would be truthy and replace the file
        self._store.copy_to(_file(path, "a copy's file"), overwrite=overwrite)

    def refresh(self) -> None:
        """Forget cached nodes, so changes written by another connection are seen."""
        self._nodes.clear()
        self._settings_of.clear()

    # --- checks ------------------------------------------------------------------------

    def check(self) -> IntegrityReport:
        """Run SQLite's ``quick_check`` over the whole file: damaged pages anywhere, not
        only those read so far. ``report.ok`` when none; otherwise SQLite's findings
        (copy what can be read with ``export_json``, or restore a backup)."""
        return self._store.quick_check()

    def verify(self, conversation_id: str | None = None) -> IntegrityReport:
        """Recompute every node's hash (of one conversation, or all): ``report.first``
        names the first node, in creation order, altered outside mp13 (or whose tree
        links are broken). See ``_integrity`` for what the hash covers. Then fold every
        node's commands again: a node whose stored effective settings (what requests
        from it use) differ was altered too (``_settings_check``)."""
        if conversation_id is not None:
            self.conversation(conversation_id)
        report = self._store.verify(conversation_id)
        rows = self._store.settings_rows(conversation_id)
        stale = tuple(settings_problems(rows))
        return attrs.evolve(report, problems=report.problems + stale) if stale else report

    # --- settings ----------------------------------------------------------------------

    def settings_at(self, node_id: str) -> EffectiveSettings:
        """The effective settings after ``node_id``'s commands (an O(1) lookup)."""
        _require_id(node_id)
        # The node cache outlives close(): a closed session reads nothing, cached or not.
        self._store.require_open()
        sid = self._settings_of.get(node_id)
        if sid is None:
            self.node(node_id)
            sid = self._settings_of[node_id]
        return self._settings.get(sid)

    def recompute_settings(self, node_id: str) -> EffectiveSettings:
        """The settings folded from scratch along the root path, ignoring stored ones.

        For checks and debugging: it must always equal ``settings_at``.
        """
        table = ScratchSettings()
        sid = table.initial
        for node in self.path(node_id):
            for cmd in node.commands:
                sid = table.intern(apply(table.get(sid), sid, cmd, table.get))
        return table.get(sid)

    # --- conversations -----------------------------------------------------------------

    def new_conversation(self, title: str = "") -> ConversationInfo:
        """A new, empty conversation (just its root node)."""
        cid = new_id()
        title = text_arg(title, "a conversation title")
        root = Node(id=new_id(), conversation_id=cid, parent_id=None, kind=NodeKind.ROOT)
        row, root = node_row(root, self._settings.initial, "", None, None)
        with self._store.lock, self._store.tx() as conn:
            seq = self._store.insert_conversation_in(conn, cid, title, row, root.created_at)
            self._cache(attrs.evolve(root, seq=seq), self._settings.initial)
        return ConversationInfo(id=cid, root_id=root.id, title=title, head_id=root.id)

    def conversations(self) -> list[ConversationInfo]:
        """Every conversation, oldest first."""
        return [self._info(r) for r in self._store.conversations()]

    def conversation(self, conversation_id: str) -> ConversationInfo:
        """One conversation's info (``NotFoundError`` if there is none)."""
        row = self._store.conversation(conversation_id) if _storable(conversation_id) else None
        if row is None:
            raise NotFoundError(
                f"no conversation {conversation_id!r} in this session; "
                "list them with session.conversations()"
            )
        return self._info(row)

    def set_title(self, conversation_id: str, title: str) -> None:
        """Rename a conversation (``NotFoundError`` if there is none)."""
        self.conversation(conversation_id)
        self._store.set_title(conversation_id, text_arg(title, "a conversation title"))

    @staticmethod
    def _info(row: tuple[Any, ...]) -> ConversationInfo:
        cid, root_id, title, head_id, created_at = row
        return ConversationInfo(
            id=cid, root_id=root_id, title=title, head_id=head_id, created_at=created_at
        )

    # --- nodes -------------------------------------------------------------------------

    def _from_row(self, r: NodeRow) -> Node:
        node = node_from_row(r)
        self._cache(node, r.state_id)
        return node

    def _cache(self, node: Node, state_id: int) -> None:
        self._nodes[node.id] = node
        self._settings_of[node.id] = state_id

    def node(self, node_id: str) -> Node:
        """The node with this id (``NotFoundError`` if there is none)."""
        _require_id(node_id)
        self._store.require_open()
        node = self._nodes.get(node_id)
        if node is not None:
            return node
        row = self._store.node(node_id)
        if row is None:
            raise NotFoundError(f"no node {node_id!r} in this session; check the id")
        return self._from_row(row)

    def children(self, node_id: str, *, archived: bool = True) -> list[Node]:
        """The children in creation order (without archived ones if ``archived=False``);
        an empty list for a leaf, or for an id that names no node."""
        out: list[Node] = []
        for row in self._store.children(node_id) if _storable(node_id) else ():
            node = self._nodes.get(row.id) or self._from_row(row)
            if archived or not node.archived:
                out.append(node)
        return out

    def has_children(self, node_id: str) -> bool:
        """Whether the node has any child (False for an id that names no node)."""
        return _storable(node_id) and self._store.has_children(node_id)

    def path(self, node_id: str) -> list[Node]:
        """The nodes from the root down to ``node_id``."""
        _require_id(node_id)
        self._store.require_open()
        out: list[Node] = []
        nid: str | None = node_id
        while nid is not None:
            node = self._nodes.get(nid)
            if node is None:
                rows = self._store.path_rows(nid)
                if not rows:
                    raise NotFoundError(f"no node {nid!r} in this session; check the id")
                out.extend(reversed([self._from_row(r) for r in rows]))
                break
            out.append(node)
            nid = node.parent_id
        out.reverse()
        return out

    def leaf(self, node_id: str) -> Node:
        """Follow the main line down from ``node_id``: at each step the main-line child,
        else the newest child; archived children are never taken."""
        self.node(node_id)
        return self.node(self._store.leaf(node_id))

    def append(
        self,
        parent_id: str,
        kind: NodeKind = NodeKind.TURN,
        turn: Turn | None = None,
        commands: tuple[Command, ...] | list[Command] = (),
        *,
        label: str = "",
    ) -> Node:
        """Append a child of ``parent_id`` (saved at once); return it, as stored.

        ``kind`` is a ``NodeKind``; a ``TURN`` node needs ``turn``, other kinds take
        none (``CursorError`` otherwise)."""
        if not isinstance(kind, NodeKind):
            names = ", ".join(f"NodeKind.{k.name}" for k in NodeKind)
            raise CursorError(f"kind is a NodeKind ({names}), not {kind!r}")
        if (kind is NodeKind.TURN) != (turn is not None):
            raise CursorError("a TURN node needs a turn and other kinds must not have one")
        return self._append_chain(parent_id, [(kind, turn, _commands(commands), label)])[0]

    def append_turns(self, parent_id: str, turns: Sequence[Turn]) -> list[Node]:
        """Append ``turns`` as a chain below ``parent_id`` (each the child of the one
        before) in one transaction: all of them are saved, or none (the error
        propagates, e.g. ``StoreError``, and the session is as it was). Returns the
        nodes as stored. The runner records a reply with tool calls and the tool turn
        holding their results this way."""
        if not isinstance(turns, (list, tuple)):
            raise CursorError(f"turns are a list of Turn, not {type(turns).__name__}")
        return self._append_chain(parent_id, [(NodeKind.TURN, t, (), "") for t in turns])

    def _append_chain(
        self, parent_id: str, children: list[tuple[NodeKind, Turn | None, tuple[Command, ...], str]]
    ) -> list[Node]:
        with self._store.lock:
            parent = self.node(parent_id)
            sid = self._settings_of[parent_id]
            planned: list[tuple[dict[str, Any], Node, int]] = []
            for kind, turn, commands, label in children:
                if not isinstance(kind, NodeKind) or not isinstance(turn, (Turn, type(None))):
                    raise CursorError(
                        f"a node is a NodeKind with a Turn or None, not {kind!r} with "
                        f"{type(turn).__name__}"
                    )
                check_new_commands(commands)
                cmds, cmds_json = stored_commands(commands)
                sid = self._settings.fold(sid, cmds)
                stored, turn_json = stored_turn(turn)
                node = Node(
                    id=new_id(),
                    conversation_id=parent.conversation_id,
                    parent_id=parent.id,
                    kind=kind,
                    depth=parent.depth + 1,
                    turn=stored,
                    commands=cmds,
                    label=text_arg(label, "a branch label"),
                )
                row, parent = node_row(node, sid, parent.hash, turn_json, cmds_json)
                planned.append((row, parent, sid))
            with self._store.tx() as conn:
                seqs = [Store.insert_node_in(conn, row) for row, _, _ in planned]
            nodes = []
            for (_, node, node_sid), seq in zip(planned, seqs, strict=True):
                nodes.append(attrs.evolve(node, seq=seq))
                self._cache(nodes[-1], node_sid)
        return nodes

    def add_commands(self, node_id: str, commands: list[Command] | tuple[Command, ...]) -> Node:
        """Append commands to a node that has no children yet (its subtree is empty, so no
        other node's settings change); ``CursorError`` otherwise."""
        commands = _commands(commands)
        with self._store.lock:
            node = self.node(node_id)
            if self.has_children(node_id):
                raise CursorError(
                    f"node {node_id} already has children; record the commands on a new "
                    "placeholder child instead (cursors do this for you)"
                )
            if not commands:
                return node
            check_new_commands(commands)
            all_cmds, cmds_json = stored_commands(node.commands + commands)
            sid = self._settings.fold(self._settings_of[node_id], all_cmds[len(node.commands) :])
            parent_hash = self.node(node.parent_id).hash if node.parent_id else ""
            _, turn_json = stored_turn(node.turn)
            _, node = node_row(
                attrs.evolve(node, commands=all_cmds), sid, parent_hash, turn_json, cmds_json
            )
            self._store.set_commands(node_id, cmds_json or "[]", sid, node.hash)
            self._cache(node, sid)
        return node

    def set_archived(self, node_id: str, archived: bool = True) -> Node:
        """Archive a node, and so its subtree (kept, but ``leaf`` passes it by, even on
        the main line), or un-archive it; returns the node as stored."""
        if not isinstance(archived, bool):
            raise ContextError(f"archived is True or False, not {archived!r}")
        with self._store.lock:
            node = self.node(node_id)
            self._store.set_flags(node_id, archived=int(archived))
            node = attrs.evolve(node, archived=archived)
            self._nodes[node_id] = node
        return node

    def set_main_line(self, node_id: str) -> Node:
        """Mark ``node_id`` as the main line among its siblings (and un-archive it)."""
        with self._store.lock:
            node = self.node(node_id)
            if node.parent_id is None:
                return node
            siblings = [s for s in self.children(node.parent_id) if s.id != node_id]
            self._store.set_main_line(node_id, [s.id for s in siblings if s.main_line])
            for s in siblings:
                if s.main_line:
                    self._nodes[s.id] = attrs.evolve(s, main_line=False)
            node = attrs.evolve(node, main_line=True, archived=False)
            self._nodes[node_id] = node
        return node

    def conversation_nodes(self, conversation_id: str) -> list[Node]:
        """Every node of a conversation in creation order."""
        self.conversation(conversation_id)
        # Not cached: an export (or a listing of every conversation) would otherwise
        # keep the whole session's text in memory for as long as the session is open.
        return [node_from_row(r) for r in self._store.conversation_nodes(conversation_id)]

    # --- what the model sees -----------------------------------------------------------

    def messages(self, node_id: str) -> list[dict[str, Any]]:
        """The chat messages for the path to ``node_id`` under its effective settings."""
        return render(self.path(node_id), self.settings_at(node_id))

    # --- positions (per scope) ---------------------------------------------------------

    def position(self, scope: str, conversation_id: str) -> str | None:
        """The node ``scope`` saved for the conversation (``save_position``), or None."""
        if not (_storable(scope) and _storable(conversation_id)):
            return None
        return self._store.position(scope, conversation_id)

    def save_position(self, scope: str, conversation_id: str, node_id: str) -> None:
        """Remember where ``scope`` is in a conversation (not in a read-only session).

        ``NotFoundError`` unless ``node_id`` is a node of that conversation."""
        if self.node(node_id).conversation_id != conversation_id:
            raise NotFoundError(
                f"node {node_id!r} is not in conversation {conversation_id!r}; "
                "save the position of one of its own nodes"
            )
        if not _storable(scope):
            raise ContextError(f"a scope name is a UTF-8 string, not {scope!r:.40}")
        if not self.read_only:
            self._store.save_position(scope, conversation_id, node_id)

    def saved_positions(self, conversation_id: str) -> list[SavedPosition]:
        """Every scope's saved position in a conversation, by scope name (what an export
        keeps; ``NotFoundError`` if there is no such conversation)."""
        self.conversation(conversation_id)
        return [
            SavedPosition(scope=scope, node_id=node_id)
            for scope, node_id in self._store.positions(conversation_id)
        ]

    def resume_point(self, scope: str, conversation_id: str) -> str:
        """Where ``scope`` picks a conversation up again: its saved position, else the
        newest node; if that lies in an archived branch (a closed try-out, trimmed
        turns), the node the branch grew from, so nothing discarded is carried on."""
        info = self.conversation(conversation_id)
        node_id = self.position(scope, conversation_id) or info.head_id or info.root_id
        try:
            path = self.path(node_id)
        except NotFoundError:
            return info.root_id
        for i, node in enumerate(path):
            if node.archived and i > 0:
                return path[i - 1].id
        return node_id

    # --- search ------------------------------------------------------------------------

    def search(
        self,
        text: str,
        *,
        limit: int = 20,
        conversation_id: str | None = None,
        raw: bool = False,
        order: str = "recent",
    ) -> list[SearchHit]:
        """Full-text search over all message text (user, assistant, tool results).

        ``text`` is plain words (all must match) and may hold any characters: quotes,
        FTS5 syntax, control characters and NUL never raise (see ``_text.fts_query``
        for what such words match). ``raw=True`` passes FTS5 query syntax through
        (``"exact phrase"``, ``a OR b``, ``pre*``). ``order``: ``"recent"`` (newest
        first, fast at any size) or ``"rank"`` (best match first, bm25; scores every
        match, so slower for common words). A hit's ``snippet`` marks ``[words]`` of
        the query: up to eight of them, and in a text over 10,000 characters only the
        first (FTS5's snippets cost grows with the places each marked word occurs).

        When a word is in a script written without spaces between words (Chinese,
        Japanese, Korean, Thai, Lao, Myanmar, Khmer), every word of the search is found
        anywhere inside the text, as a substring (case-insensitive): ``日本語`` finds
        ``日本語のテキスト`` and ``python 中文`` finds ``我喜欢中文和PYTHON``. Such a
        search is newest first whatever ``order`` says (it has no bm25 score) and its
        snippets mark those words. ``raw=True`` queries use the word index only, where
        such a run of characters is one word.
        """
        if order not in ("recent", "rank"):
            raise ContextError(f"search order must be 'recent' or 'rank', got {order!r}")
        if not isinstance(text, str):
            raise ContextError(f"search text must be a string of words, got {type(text).__name__}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ContextError(f"search limit must be a whole number >= 1, got {limit!r}")
        _check_flags(raw=raw)  # "no" would be truthy and pass FTS5 syntax through
        if conversation_id is not None:
            self.conversation(conversation_id)  # a mistyped id is NotFoundError, not no hits
        pieces: list[str] = []
        if raw:
            query = scrub(text)
            marks = (query, query)
        else:
            words = list(dict.fromkeys(text.split()))  # a word twice adds only work
            if any(unspaced(w) for w in words):
                # A script written without spaces: the word index keeps a run of it as
                # one token, often with Latin words glued on (中文和PYTHON), so every word
                # of this search is found as a substring, in the texts with such
                # characters (``_text.unspaced``; ``Store.search``).
                pieces = list(dict.fromkeys(p for w in words for p in unspaced_pieces(w)))
                words = []
            query = fts_query(" ".join(words))
            # Words with a letter or digit first: a word without any marks nothing.
            words.sort(key=lambda w: not any(c.isalnum() for c in w))
            marked = [fts_query(w) for w in words[:_MARKED_WORDS]]
            # A few words: the query marks them all itself (and lets the store make a
            # short text's snippet with its hit); more: the first few, OR-ed.
            few = len(words) <= _MARKED_WORDS
            marks = (query if few else " OR ".join(marked), marked[0] if marked else "")
        if not query.strip() and not pieces:
            return []
        try:
            rows = self._store.search(query, limit, conversation_id, order == "rank", marks, pieces)
        except StoreError as exc:
            if not raw or self.closed:  # plain words always make a valid query
                raise
            raise StoreError(
                f"search query {text!r} is not valid FTS5 syntax ({exc.__cause__}); "
                "search plain words with raw=False"
            ) from exc
        titles: dict[str, str] = {}
        hits = []
        for cid, node_id, role, snippet, rank in rows:
            if cid not in titles:
                row = self._store.conversation(cid)
                titles[cid] = row[2] if row else ""
            hits.append(
                SearchHit(
                    conversation_id=cid,
                    node_id=node_id,
                    snippet=snippet,
                    role=Role(role),
                    score=-float(rank),
                    title=titles[cid],
                )
            )
        return hits

    # --- export / import ---------------------------------------------------------------

    def export_json(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the whole session as JSON (see ``SessionData``), node hashes included.

        Like ``save_copy``, an export never replaces a file: if ``path`` exists it
        raises ``SerializationError`` and writes nothing, unless ``overwrite=True``.
        The file appears whole or not at all (written beside it, then renamed)."""
        _check_flags(overwrite=overwrite)  # "no" would be truthy and replace the file
        export_session(self, _file(path, "an export file"), overwrite=overwrite)

    @classmethod
    def import_json(
        cls,
        path: str | os.PathLike[str],
        into: Session | str | os.PathLike[str] | None = None,
        *,
        new_ids: bool = False,
        accept_edits: bool = False,
        limits: ImportLimits | None = None,
    ) -> Session:
        """Read an export into ``into`` (a session, a file path, or a new in-memory
        session when ``None``) and return that session (see ``import_document``)."""
        _check_flags(new_ids=new_ids, accept_edits=accept_edits)  # before a file is made
        doc = read_document(_file(path, "an export file"))
        if isinstance(into, Session):
            session, made = into, None
        else:
            name = _file(into or ":memory:", "a session file")
            made = name if name != ":memory:" and not os.path.lexists(name) else None
            session = cls.open(name)
        try:
            session.import_document(doc, new_ids=new_ids, accept_edits=accept_edits, limits=limits)
        except BaseException:
            if session is not into:
                session.close()
            if made is not None:  # a refused import leaves no new, empty session file
                remove_database(made)
            raise
        return session

    def import_document(
        self,
        data: Any,
        *,
        new_ids: bool = False,
        accept_edits: bool = False,
        limits: ImportLimits | None = None,
    ) -> ImportReport:
        """Import an export (the decoded JSON, or a ``SessionData``) as new conversations.

        The whole document is validated first, then written in one transaction:
        on any error (``SerializationError`` naming the place) nothing is written.
        Conversations keep their ids, and an id this session already has refuses
        the whole import (``ImportConflictError``); ``new_ids=True`` imports copies
        under fresh ids (e.g. a session's own export). Nothing in a document can
        attach to, or change, an existing conversation. A version 2 export whose
        content does not match its hashes was edited: ``TamperedError``, unless
        ``accept_edits=True`` (the report lists the edited nodes).
        """
        _check_flags(new_ids=new_ids, accept_edits=accept_edits)
        if attrs.has(type(data)):  # a SessionData: checked as the JSON it would export to
            data = json.loads(json.dumps(unstructure(data)))
        plans, verified, edited = plan_import(
            data, new_ids=new_ids, accept_edits=accept_edits, limits=limits or ImportLimits()
        )
        write_plans(self._store, self._settings, plans)
        return ImportReport(
            conversations=tuple(p.info.id for p in plans),
            nodes=sum(len(p.nodes) for p in plans),
            verified=verified,
            edited=edited,
        )


#: The most words of a search that its snippets mark (see ``Store.search``).
_MARKED_WORDS = 8


def _check_flags(**flags: object) -> None:
    """``ContextError`` unless each flag is a bool (a truthy "no" must not switch one on)."""
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise ContextError(f"{flag} is True or False, not {value!r}")


def _file(path: object, what: str) -> str:
    """A caller's file name as a ``str`` (an ``int`` would open a file descriptor)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ContextError(f"{what} is a path (a str or os.PathLike), not {type(path).__name__}")
    return os.fspath(path)


def _storable(key: object) -> bool:
    """Whether ``key`` could be a stored id: a string SQLite can take (UTF-8, so no lone
    surrogate). Anything else names nothing, and may not even be a dict key."""
    if not isinstance(key, str):
        return False
    try:
        key.encode()
    except UnicodeEncodeError:
        return False
    return True


def _require_id(node_id: object) -> None:
    """``NotFoundError`` for a node id that cannot name a stored node (see ``_storable``)."""
    if not _storable(node_id):
        raise NotFoundError(
            f"no node {node_id!r} in this session; a node id is a string such as cursor.node_id"
        )


def _commands(commands: object) -> tuple[Command, ...]:
    """A caller's list of commands as a tuple (each is checked when it is stored)."""
    if not isinstance(commands, (list, tuple)):
        raise CursorError(f"commands are a list of Command, not {type(commands).__name__}")
    return tuple(commands)
