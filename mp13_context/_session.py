# SPDX-License-Identifier: MIT
"""``Session``: conversations as trees, saved incrementally in SQLite.

A session is the tree API over one store. It appends nodes and commands, changes
flags, resolves the effective state at any node, renders messages and searches.
Every mutation is saved at once in its own transaction; nothing needs a "save".

Invariants:

- Append-only tree (see ``_model``). Commands are only appended to nodes
  without children, so the effective state of an existing node never changes and
  can be computed once: each node stores the id of its (interned) state, and
  ``state_at`` is a lookup at any depth, also right after reopening a file.
- The session caches nodes and states it has read. Nodes are immutable apart
  from flags and commands, which only this session changes; another process
  writing the same file is seen after ``refresh()``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

from mp13_context._convert import dumps, loads, structure, unstructure
from mp13_context._errors import ContextError, CursorError, NotFoundError, StoreError
from mp13_context._messages import render
from mp13_context._model import (
    Command,
    ConversationInfo,
    Node,
    NodeKind,
    Role,
    SearchHit,
    Turn,
    new_id,
)
from mp13_context._state import EffectiveState, apply, changes_state, check_command
from mp13_context._store import NodeRow, Store


def _search(turn: Turn | None) -> tuple[str, str] | None:
    """``(role, text)`` to index for a turn (text, reasoning, tool results)."""
    if turn is None:
        return None
    parts = [turn.text, turn.reasoning, *(r.content for r in turn.tool_results)]
    text = "\n".join(p for p in parts if p)
    return (turn.role.value, text) if text else None


def _fts_query(text: str) -> str:
    """Plain words -> an FTS5 query that matches all of them, with no operators."""
    terms = [t.replace('"', '""') for t in text.split()]
    return " ".join(f'"{t}"' for t in terms)


class Session:
    """Conversations, each a tree of nodes, in one SQLite file (or ``":memory:"``)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._nodes: dict[str, Node] = {}
        self._state_of: dict[str, int] = {}
        self._states: dict[int, EffectiveState] = {}
        self._state_ids: dict[str, int] = {}
        self._initial_state_id = self._intern(EffectiveState())

    # --- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ":memory:") -> Session:
        """Open (or create) a session file; ``":memory:"`` keeps it in memory."""
        return cls(Store(os.fspath(path)))

    @property
    def filename(self) -> str:
        """The SQLite file this session lives in (``":memory:"`` for none)."""
        return self._store.path

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def refresh(self) -> None:
        """Forget cached nodes, so changes written by another connection are seen."""
        self._nodes.clear()
        self._state_of.clear()

    # --- states ------------------------------------------------------------------------

    def _intern(self, state: EffectiveState) -> int:
        data = dumps(state)
        sid = self._state_ids.get(data)
        if sid is None:
            sid = self._store.intern_state(data)
            self._state_ids[data] = sid
            self._states[sid] = state
        return sid

    def _state(self, sid: int) -> EffectiveState:
        state = self._states.get(sid)
        if state is None:
            state = loads(self._store.state(sid), EffectiveState)
            self._states[sid] = state
        return state

    def _fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        for cmd in commands:
            if changes_state(cmd):
                state = self._state(sid)
                check_command(state, cmd)
                sid = self._intern(apply(state, sid, cmd, self._state))
        return sid

    def state_at(self, node_id: str) -> EffectiveState:
        """The effective state after ``node_id``'s commands (an O(1) lookup)."""
        sid = self._state_of.get(node_id)
        if sid is None:
            self.node(node_id)
            sid = self._state_of[node_id]
        return self._state(sid)

    def recompute_state(self, node_id: str) -> EffectiveState:
        """The state folded from scratch along the root path, ignoring stored states.

        For checks and debugging: it must always equal ``state_at``.
        """
        states: dict[int, EffectiveState] = {}
        ids: dict[str, int] = {}

        def intern(state: EffectiveState) -> int:
            return ids.setdefault(dumps(state), len(ids) + 1)

        state = EffectiveState()
        sid = intern(state)
        states[sid] = state
        for node in self.path(node_id):
            for cmd in node.commands:
                state = apply(state, sid, cmd, states.__getitem__)
                sid = intern(state)
                states[sid] = state
        return state

    # --- conversations -----------------------------------------------------------------

    def new_conversation(self, title: str = "") -> ConversationInfo:
        """A new, empty conversation (just its root node)."""
        cid = new_id()
        root = Node(id=new_id(), conversation_id=cid, parent_id=None, kind=NodeKind.ROOT)
        row = self._row(root, self._initial_state_id)
        with self._store.lock:
            seq = self._store.insert_conversation(cid, title, row, root.created_at)
            self._cache(attrs.evolve(root, seq=seq), self._initial_state_id)
        return ConversationInfo(id=cid, root_id=root.id, title=title, head_id=root.id)

    def conversations(self) -> list[ConversationInfo]:
        return [self._info(r) for r in self._store.conversations()]

    def conversation(self, conversation_id: str) -> ConversationInfo:
        row = self._store.conversation(conversation_id)
        if row is None:
            raise NotFoundError(
                f"no conversation {conversation_id!r} in this session; "
                "list them with session.conversations()"
            )
        return self._info(row)

    def set_title(self, conversation_id: str, title: str) -> None:
        self.conversation(conversation_id)
        self._store.set_title(conversation_id, title)

    @staticmethod
    def _info(row: tuple) -> ConversationInfo:
        cid, root_id, title, head_id, created_at = row
        return ConversationInfo(
            id=cid, root_id=root_id, title=title, head_id=head_id, created_at=created_at
        )

    # --- nodes -------------------------------------------------------------------------

    def _row(self, node: Node, state_id: int) -> dict[str, Any]:
        return {
            "id": node.id,
            "conversation_id": node.conversation_id,
            "parent_id": node.parent_id,
            "kind": node.kind.value,
            "depth": node.depth,
            "turn": dumps(node.turn) if node.turn is not None else None,
            "commands": dumps([unstructure(c) for c in node.commands]) if node.commands else None,
            "archived": int(node.archived),
            "main_line": int(node.main_line),
            "label": node.label,
            "created_at": node.created_at,
            "state_id": state_id,
        }

    def _from_row(self, r: NodeRow) -> Node:
        node = Node(
            id=r.id,
            conversation_id=r.conversation_id,
            parent_id=r.parent_id,
            kind=NodeKind(r.kind),
            depth=r.depth,
            seq=r.seq,
            turn=loads(r.turn, Turn) if r.turn else None,
            commands=tuple(structure(c, Command) for c in json.loads(r.commands))
            if r.commands
            else (),
            archived=bool(r.archived),
            main_line=bool(r.main_line),
            label=r.label,
            created_at=r.created_at,
        )
        self._cache(node, r.state_id)
        return node

    def _cache(self, node: Node, state_id: int) -> None:
        self._nodes[node.id] = node
        self._state_of[node.id] = state_id

    def node(self, node_id: str) -> Node:
        """The node with this id (``NotFoundError`` if there is none)."""
        node = self._nodes.get(node_id)
        if node is not None:
            return node
        row = self._store.node(node_id)
        if row is None:
            raise NotFoundError(f"no node {node_id!r} in this session; check the id")
        return self._from_row(row)

    def children(self, node_id: str, *, archived: bool = True) -> list[Node]:
        """The children in creation order (without archived ones if ``archived=False``)."""
        out = []
        for row in self._store.children(node_id):
            node = self._nodes.get(row.id) or self._from_row(row)
            if archived or not node.archived:
                out.append(node)
        return out

    def has_children(self, node_id: str) -> bool:
        return self._store.has_children(node_id)

    def path(self, node_id: str) -> list[Node]:
        """The nodes from the root down to ``node_id``."""
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
        else the newest child that is not archived."""
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
        """Append a child of ``parent_id`` (saved at once); return it."""
        if (kind is NodeKind.TURN) != (turn is not None):
            raise CursorError("a TURN node needs a turn and other kinds must not have one")
        with self._store.lock:
            parent = self.node(parent_id)
            commands = tuple(commands)
            sid = self._fold(self._state_of[parent_id], commands)
            node = Node(
                id=new_id(),
                conversation_id=parent.conversation_id,
                parent_id=parent_id,
                kind=kind,
                depth=parent.depth + 1,
                turn=attrs.evolve(turn, node_id=None) if turn is not None else None,
                commands=commands,
                label=label,
            )
            seq = self._store.insert_node(self._row(node, sid), _search(node.turn))
            node = attrs.evolve(node, seq=seq)
            self._cache(node, sid)
        return node

    def add_commands(self, node_id: str, commands: list[Command] | tuple[Command, ...]) -> Node:
        """Append commands to a node that has no children yet (its subtree is empty, so no
        other node's state changes); ``CursorError`` otherwise."""
        with self._store.lock:
            node = self.node(node_id)
            if self.has_children(node_id):
                raise CursorError(
                    f"node {node_id} already has children; record the commands on a new "
                    "placeholder child instead (cursors do this for you)"
                )
            sid = self._fold(self._state_of[node_id], tuple(commands))
            node = attrs.evolve(node, commands=node.commands + tuple(commands))
            self._store.set_commands(node_id, dumps([unstructure(c) for c in node.commands]), sid)
            self._cache(node, sid)
        return node

    def set_archived(self, node_id: str, archived: bool = True) -> Node:
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
        return [self._from_row(r) for r in self._store.conversation_nodes(conversation_id)]

    # --- what the model sees -----------------------------------------------------------

    def messages(self, node_id: str) -> list[dict[str, Any]]:
        """The chat messages for the path to ``node_id`` under its effective state."""
        return render(self.path(node_id), self.state_at(node_id))

    # --- positions (per scope) ---------------------------------------------------------

    def position(self, scope: str, conversation_id: str) -> str | None:
        return self._store.position(scope, conversation_id)

    def save_position(self, scope: str, conversation_id: str, node_id: str) -> None:
        self._store.save_position(scope, conversation_id, node_id)

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

        ``text`` is plain words (all must match); ``raw=True`` passes FTS5 query
        syntax through (``"exact phrase"``, ``a OR b``, ``pre*``). ``order``:
        ``"recent"`` (newest first, fast at any size) or ``"rank"`` (best match
        first, bm25; scores every match, so slower for common words).
        """
        if order not in ("recent", "rank"):
            raise ContextError(f"search order must be 'recent' or 'rank', got {order!r}")
        query = text if raw else _fts_query(text)
        if not query.strip():
            return []
        try:
            rows = self._store.search(query, limit, conversation_id, order == "rank")
        except StoreError as exc:
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

    def export_json(self, path: str | os.PathLike[str]) -> None:
        """Write the whole session as JSON (see ``SessionData``)."""
        from mp13_context._export import export_session

        export_session(self, path)

    @classmethod
    def import_json(
        cls,
        path: str | os.PathLike[str],
        into: Session | str | os.PathLike[str] | None = None,
        *,
        new_ids: bool = False,
    ) -> Session:
        """Read an export into ``into`` (a session, a file path, or a new in-memory
        session when ``None``) and return that session. Conversations keep their ids;
        ``new_ids=True`` imports copies under fresh ids (e.g. a session's own export)."""
        from mp13_context._export import import_session

        session = into if isinstance(into, Session) else cls.open(into or ":memory:")
        import_session(session, path, new_ids=new_ids)
        return session

    def _insert_imported(self, info: ConversationInfo, nodes: list[Node]) -> None:
        """Recreate a conversation with the given ids (used by import)."""
        with self._store.lock:
            if self._store.conversation(info.id) is not None:
                raise StoreError(
                    f"conversation {info.id} already exists in this session; import into "
                    "a new session, or pass new_ids=True to import copies"
                )
            ordered = sorted(nodes, key=lambda n: n.seq)  # parents were created first
            roots = [n for n in ordered if n.parent_id is None]
            if len(roots) != 1 or ordered[0] is not roots[0]:
                raise StoreError(f"conversation {info.id} must have exactly one root node, first")
            root = roots[0]
            sid = self._fold(self._initial_state_id, root.commands)
            seq = self._store.insert_conversation(
                info.id, info.title, self._row(root, sid), info.created_at
            )
            self._cache(attrs.evolve(root, seq=seq), sid)
            for child in ordered[1:]:
                parent = self._nodes.get(child.parent_id or "")
                if parent is None:
                    raise StoreError(
                        f"node {child.id} of conversation {info.id} has a missing parent"
                    )
                csid = self._fold(self._state_of[parent.id], child.commands)
                child = attrs.evolve(child, depth=parent.depth + 1)
                seq = self._store.insert_node(self._row(child, csid), _search(child.turn))
                self._cache(attrs.evolve(child, seq=seq), csid)
