# SPDX-License-Identifier: MIT
"""Importing a session export: validate all of it, then write it in one transaction.

``plan_import`` reads a decoded export document and returns what to insert, or
raises a ``SerializationError`` whose message and ``where`` name the place
(``conversations[0].nodes[3].turn.text``, node id). It checks everything that
can be checked without the store, in this order:

1. Shape and size (``_schema.check_shape``): JSON nesting, string lengths and
   node count within ``ImportLimits`` (walked without recursion, so no
   ``RecursionError``); no lone surrogate anywhere (mp13's export never writes
   one).
2. Types, strictly (``_schema``): each value has exactly the type its field
   declares (no ``"5"`` for ``5``, no ``1`` for ``true``), enums hold known
   values, numbers are finite; ``format`` and ``version`` are right.
3. Trees: ids unique in the document; every node belongs to its conversation;
   exactly one root, the one ``info.root_id`` names; every parent is a node of
   the same conversation *in the document* (so nothing can be grafted onto a
   node of the session); no cycles; tree depth within the limits; turn nodes
   and only they carry a turn; each saved position (export version 3) is a
   ``{scope, node_id}`` naming a node of its own conversation in the document,
   one per scope.
4. Hashes (export version 2): each node's hash must match its content and its
   parent's hash. A mismatch means the document was edited after export: it is
   refused (``TamperedError``) unless ``accept_edits=True``, which imports it
   and lists the edited nodes in the report. Version 1 exports carry no hashes
   and import as unverified.

Imported data always lands in new conversations: with ``new_ids=True`` every
conversation and node gets a fresh id (remapped consistently inside the
document, saved positions included); otherwise the document's ids are kept and
the session refuses the whole import (``ImportConflictError``) if any of them
exists already.

``write_plans`` then folds the commands (``params.set`` values go through the
same ``validate_params`` as a live command, pops must have something to undo)
and writes everything, saved positions included, in one transaction: any
failure leaves the store and the session's caches as they were.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import attrs

from mp13_context._convert import dumps, structure, unstructure
from mp13_context._errors import (
    CommandError,
    ContextError,
    ContextKeywordError,
    ImportConflictError,
    SerializationError,
    TamperedError,
)
from mp13_context._integrity import row_hash
from mp13_context._interned import SettingsTable, StagedSettings
from mp13_context._model import ConversationInfo, Node, NodeKind, SavedPosition, new_id
from mp13_context._rows import node_row, stored_commands, stored_turn
from mp13_context._schema import (
    CHECK_INFO,
    CHECK_NODE,
    CHECK_POSITION,
    LIMIT_HINT,
    Path,
    check_shape,
    fail,
    fmt,
    kind_of,
)
from mp13_context._store import Store
from mp13_context._text import scrub
from mp13_toolbox import strict_keywords

FORMAT = "mp13.session"
#: 4: tool results may carry a ``traceback`` (hashed with the turn, so an older mp13,
#: which would drop it and then find the hash wrong, refuses the file by its version).
#: 3: conversations carry saved ``positions`` (still read). 2: nodes carry ``hash``
#: (still read, no positions). 1: no hashes (still read).
VERSION = 4


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ContextError(
            f"ImportLimits.{attribute.name} must be a whole number >= 1, got {value!r}"
        )


@strict_keywords(ContextKeywordError)
@attrs.frozen(kw_only=True)
class ImportLimits:
    """Bounds an imported document must keep (raise them for very large exports)."""

    #: JSON nesting depth of the whole document.
    max_nesting: int = attrs.field(default=64, validator=_positive_int)
    #: Characters in one string.
    max_text: int = attrs.field(default=16 * 1024 * 1024, validator=_positive_int)
    #: Nodes in one document.
    max_nodes: int = attrs.field(default=1_000_000, validator=_positive_int)
    #: Depth of a conversation tree (turns in a row).
    max_depth: int = attrs.field(default=100_000, validator=_positive_int)


@attrs.frozen(kw_only=True)
class ImportReport:
    """What an import did.

    ``conversations``: the new conversations' ids in the session, in document
    order. ``verified``: the document carried hashes and every node matched.
    ``edited``: the document's ids of nodes whose hash did not match (only with
    ``accept_edits=True``; otherwise the import is refused).
    """

    conversations: tuple[str, ...] = ()
    nodes: int = 0
    verified: bool = False
    edited: tuple[str, ...] = ()


@attrs.frozen
class PlannedNode:
    node: Node
    where: str


@attrs.frozen
class PlannedConversation:
    """A conversation to insert: its header, its nodes (parents first) and the positions
    saved in it (node ids as they will be stored)."""

    info: ConversationInfo
    nodes: tuple[PlannedNode, ...]
    positions: tuple[SavedPosition, ...] = ()


# --- header and trees (3.) --------------------------------------------------------------------


def _header(doc: Any) -> int:
    if not isinstance(doc, dict):
        raise fail((), f"expected an object, got {kind_of(doc)}")
    if doc.get("format") != FORMAT:
        raise fail(("format",), f"not an mp13 session export (format {FORMAT!r} expected)")
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise fail(("version",), f"expected a positive integer, got {version!r:.60}")
    if version > VERSION:
        raise SerializationError(
            f"this export has version {version}; this mp13 reads up to {VERSION}: upgrade mp13",
            where="version",
        )
    if not isinstance(doc.get("conversations"), list):
        raise fail(("conversations",), f"expected a list, got {kind_of(doc.get('conversations'))}")
    return version


def _ordered(
    nodes: list[tuple[Node, Path]], root: tuple[Node, Path], limits: ImportLimits
) -> Iterator[tuple[Node, Path, int]]:
    """Parents first, in the document's ``seq`` order where that allows; with depths.

    Every node must be reachable from the root: one that is not sits in a cycle
    or under a parent that is missing.
    """
    children: dict[str, list[tuple[int, int, Node, Path]]] = {}
    for i, (node, path) in enumerate(nodes):
        assert node.parent_id is not None  # _conversation kept the one root out of nodes
        children.setdefault(node.parent_id, []).append((node.seq, i, node, path))
    heap: list[tuple[int, int, Node, Path, int]] = [(root[0].seq, -1, root[0], root[1], 0)]
    placed = 0
    while heap:
        _, _, node, path, depth = heapq.heappop(heap)
        if depth > limits.max_depth:
            raise fail(
                path, f"the tree is deeper than {limits.max_depth} levels", node.id, LIMIT_HINT
            )
        placed += 1
        yield node, path, depth
        for seq, i, child, cpath in children.pop(node.id, ()):
            heapq.heappush(heap, (seq, i, child, cpath, depth + 1))
    if placed != len(nodes) + 1:
        left = next(iter(children.values()))[0]
        raise fail(left[3], "the node is not connected to the root (a cycle?)", left[2].id)


def _conversation(
    i: int, conv: Any, seen: set[str], seen_nodes: set[str]
) -> tuple[ConversationInfo, tuple[Node, Path], list[tuple[Node, Path]], list[SavedPosition]]:
    path: Path = ("conversations", i)
    if not isinstance(conv, dict):
        raise fail(path, f"expected a conversation object, got {kind_of(conv)}")
    CHECK_INFO(conv.get("info"), (*path, "info"))
    raw_nodes = conv.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise fail((*path, "nodes"), f"expected a list, got {kind_of(raw_nodes)}")
    info = structure(conv["info"], ConversationInfo)
    if info.id in seen:
        raise fail((*path, "info", "id"), f"conversation id {info.id} is used twice")
    seen.add(info.id)
    root: tuple[Node, Path] | None = None
    nodes: list[tuple[Node, Path]] = []
    for j, raw in enumerate(raw_nodes):
        npath: Path = (*path, "nodes", j)
        CHECK_NODE(raw, npath)
        try:
            node = structure(raw, Node)
        except SerializationError as exc:
            raise fail(npath, str(exc), raw.get("id")) from exc
        if node.id in seen_nodes:
            raise fail(npath, "this id is used twice in the document", node.id)
        seen_nodes.add(node.id)
        if node.conversation_id != info.id:
            raise fail(
                npath, f"the node says it is in conversation {node.conversation_id}", node.id
            )
        if (node.kind is NodeKind.TURN) != (node.turn is not None):
            raise fail(npath, "turn nodes, and only they, carry a turn", node.id)
        if node.parent_id is None:
            if root is not None:
                raise fail(npath, f"a second root (the first is {root[0].id})", node.id)
            if node.kind is not NodeKind.ROOT or node.id != info.root_id:
                raise fail(npath, f"the root must be the ROOT node {info.root_id}", node.id)
            root = (node, npath)
            continue
        if node.kind is NodeKind.ROOT:
            raise fail(npath, "a ROOT node with a parent", node.id)
        nodes.append((node, npath))
    if root is None:
        raise fail(path, f"the conversation has no root node {info.root_id}")
    known = {n.id for n, _ in nodes} | {root[0].id}
    for node, npath in nodes:
        if node.parent_id not in known:
            raise fail(
                npath,
                f"its parent {node.parent_id} is not a node of this conversation in the "
                "document (an import never attaches to existing nodes)",
                node.id,
            )
    return info, root, nodes, _positions(conv, path, known)


def _positions(conv: dict[str, Any], path: Path, known: set[str]) -> list[SavedPosition]:
    """The conversation's saved positions: one per scope, each at one of its nodes in the
    document (so none can point into another conversation or the importing session)."""
    ppath: Path = (*path, "positions")
    raw = conv.get("positions", [])
    if not isinstance(raw, list):
        raise fail(ppath, f"expected a list of saved positions, got {kind_of(raw)}")
    out: list[SavedPosition] = []
    scopes: set[str] = set()
    for k, item in enumerate(raw):
        CHECK_POSITION(item, (*ppath, k))
        position = structure(item, SavedPosition)
        if position.scope in scopes:
            raise fail((*ppath, k, "scope"), f"scope {position.scope!r:.60} is saved twice")
        scopes.add(position.scope)
        if position.node_id not in known:
            raise fail(
                (*ppath, k, "node_id"),
                f"scope {position.scope!r:.60} is saved at {position.node_id!r:.60}, which is "
                "not a node of this conversation in the document",
            )
        out.append(position)
    return out


# --- hashes (4.) ------------------------------------------------------------------------------


def content_hash(node: Node, parent_hash: str) -> str:
    """The hash ``node`` has when stored under a parent with ``parent_hash``."""
    return row_hash(
        parent_hash,
        node.kind.value,
        dumps(node.turn) if node.turn is not None else None,
        dumps([unstructure(c) for c in node.commands]) if node.commands else None,
        node.label,
        node.created_at,
    )


def plan_import(
    doc: Any, *, new_ids: bool = False, accept_edits: bool = False, limits: ImportLimits
) -> tuple[list[PlannedConversation], bool, tuple[str, ...]]:
    """Validate ``doc`` (see the module docstring); return the plan, whether the hashes
    were verified, and the ids of edited nodes accepted with ``accept_edits``."""
    check_shape(doc, limits.max_nesting, limits.max_text)
    version = _header(doc)
    seen: set[str] = set()
    seen_nodes: set[str] = set()
    total = 0
    plans: list[PlannedConversation] = []
    edited: list[str] = []
    for i, conv in enumerate(doc["conversations"]):
        info, root, nodes, positions = _conversation(i, conv, seen, seen_nodes)
        total += len(nodes) + 1
        if total > limits.max_nodes:
            raise fail(("conversations", i), f"more than {limits.max_nodes} nodes", hint=LIMIT_HINT)
        ids = {n.id: new_id() for n, _ in [root, *nodes]} if new_ids else None
        cid = new_id() if new_ids else info.id
        hashes: dict[str, str] = {}
        planned: list[PlannedNode] = []
        for node, path, depth in _ordered(nodes, root, limits):
            where = f"{fmt(path)} (node {node.id})"
            if version >= 2:
                digest = content_hash(node, hashes.get(node.parent_id or "", ""))
                hashes[node.id] = node.hash  # children are checked against what was exported
                if node.hash != digest:
                    if not accept_edits:
                        raise TamperedError(
                            f"import refused, nothing was written: {where} was edited after "
                            "export (its content does not match its hash); if the edit is "
                            "yours, import with accept_edits=True",
                            where=where,
                        )
                    edited.append(node.id)
            parent = node.parent_id
            new = attrs.evolve(
                node,
                id=ids[node.id] if ids else node.id,
                conversation_id=cid,
                parent_id=(ids[parent] if ids else parent) if parent is not None else None,
                depth=depth,
                seq=0,
                hash="",
            )
            planned.append(PlannedNode(new, where))
        header = attrs.evolve(info, id=cid, root_id=planned[0].node.id, head_id=None)
        moved = tuple(attrs.evolve(p, node_id=ids[p.node_id]) if ids else p for p in positions)
        plans.append(PlannedConversation(header, tuple(planned), moved))
    return plans, version >= 2 and not edited, tuple(edited)


# --- writing ----------------------------------------------------------------------------------


def write_plans(store: Store, states: SettingsTable, plans: list[PlannedConversation]) -> None:
    """Insert validated conversations in one transaction: conflicts refuse all of it, and
    the state cache learns new states only after the transaction commits, so a failure
    leaves the store and the session exactly as they were."""
    initial = states.initial
    with store.lock:
        with store.tx() as conn:
            _refuse_conflicts(store, conn, plans)
            staged = StagedSettings(states, conn)
            for plan in plans:
                sids: dict[str | None, int] = {None: initial}
                hashes: dict[str | None, str] = {None: ""}
                for planned in plan.nodes:
                    node = planned.node
                    try:
                        # params.set values go through the live command's validate_params
                        cmds, cmds_json = stored_commands(node.commands)
                        sid = staged.fold(sids[node.parent_id], cmds)
                    except CommandError as exc:
                        raise SerializationError(
                            f"import refused, nothing was written: {planned.where}: {exc}",
                            where=planned.where,
                        ) from exc
                    turn, turn_json = stored_turn(node.turn)
                    node = attrs.evolve(node, turn=turn, commands=cmds)
                    row, node = node_row(node, sid, hashes[node.parent_id], turn_json, cmds_json)
                    sids[node.id], hashes[node.id] = sid, node.hash
                    if node.parent_id is None:
                        info = plan.info
                        store.insert_conversation_in(
                            conn, info.id, scrub(info.title), row, info.created_at
                        )
                    else:
                        store.insert_node_in(conn, row)
                for position in plan.positions:
                    store.save_position_in(conn, position.scope, plan.info.id, position.node_id)
        staged.commit()


def _refuse_conflicts(store: Store, conn: Any, plans: list[PlannedConversation]) -> None:
    cids = store.existing(conn, "conversations", [p.info.id for p in plans])
    nids = store.existing(conn, "nodes", [n.node.id for p in plans for n in p.nodes])
    if cids or nids:
        what = f"conversation {cids[0]}" if cids else f"node {nids[0]}"
        raise ImportConflictError(
            f"import refused, nothing was written: {what} already exists in this session "
            f"({len(cids)} conversation and {len(nids)} node ids are taken); an import never "
            "changes existing conversations: pass new_ids=True to import copies under fresh "
            "ids, or import into a new session",
            where=what,
        )
