# SPDX-License-Identifier: MIT
"""Tamper evidence and damage checks: node hashes, ``Session.verify`` and ``Session.check``.

Every stored node carries ``hash``: the SHA-256 (hex) of its parent's hash and
its *content*, so a node's hash vouches for its whole path from the root, like
a ledger. The content is what a node says and never changes after it is
recorded: ``kind``, ``turn``, ``commands``, ``label`` and ``created_at``. Left
out on purpose:

- the flags ``archived`` and ``main_line``, which normal use changes
  (closing a try-out, promoting a branch);
- ids, ``depth`` and ``seq``, which say where a node is stored, not what it
  says, so an import under fresh ids keeps every hash. The parent link is
  still covered: moving a node under another parent breaks its hash, because
  the new parent's hash differs.

Commands may only be appended to a node that has no children yet (see
``_model``), so the only hash that ever changes is that of a childless node.

The content is hashed in one canonical JSON form (sorted keys, no spaces,
ASCII escapes) of the stored JSON values, so the hash of a row can be
recomputed from the row alone and the hash of an exported node from the
export alone. This definition is frozen: files and exports carry these
hashes, so changing it needs a new named migration and a new export version.

The hash detects edits made outside the library (a row changed with raw SQL,
an export edited by hand). It is not a signature: whoever can write the file
can also recompute every hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import NamedTuple

import attrs


def row_hash(
    parent_hash: str,
    kind: str,
    turn: str | None,
    commands: str | None,
    label: str,
    created_at: float,
) -> str:
    """The hash of a stored node whose parent has ``parent_hash`` (``""`` for a root).

    ``turn`` and ``commands`` are the row's JSON column text (the unstructured ``Turn``
    and the list of unstructured ``Command``s), ``None`` / empty when the node has
    none; the content is hashed in its canonical JSON form (see the module docstring).
    """
    turn_value = json.loads(turn) if turn else None
    commands_value = json.loads(commands) if commands else None
    content = {
        "kind": kind,
        "turn": turn_value,
        "commands": list(commands_value or ()),
        "label": label,
        "created_at": float(created_at),
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{parent_hash}\n{canonical}".encode("ascii")).hexdigest()


@attrs.frozen(kw_only=True)
class IntegrityProblem:
    """One problem ``Session.verify`` or ``Session.check`` found.

    ``node_id`` / ``conversation_id`` say where, when the problem is about a node
    (``None`` for damage SQLite reports about pages).
    """

    message: str
    node_id: str | None = None
    conversation_id: str | None = None


@attrs.frozen(kw_only=True)
class IntegrityReport:
    """What a check found: ``ok`` when nothing; ``problems`` in creation order.

    ``checked``: the nodes ``verify`` recomputed, or the pages of the file ``check``
    covered.
    """

    checked: int = 0
    problems: tuple[IntegrityProblem, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def first(self) -> IntegrityProblem | None:
        """The first problem (for ``verify``: the first node altered, in creation order)."""
        return self.problems[0] if self.problems else None


class VerifyRow(NamedTuple):
    """A row for ``verify``: a node's stored columns, then its parent's stored hash and
    conversation (``None`` when the parent is missing) and its conversation's root id
    (``None`` when the conversation is)."""

    id: str
    conversation_id: str
    parent_id: str | None
    kind: str
    turn: str | None
    commands: str | None
    label: str
    created_at: float
    hash: str
    parent_hash: str | None
    parent_conversation_id: str | None
    root_id: str | None


def verify_rows(rows: Iterable[VerifyRow]) -> IntegrityReport:
    """Check every row's hash against its content and its parent's stored hash.

    Each node is checked on its own (its stored parent hash, not a recomputed
    one), so an edit is reported at the node that was edited, not at every
    descendant: the first problem is the first node altered.
    """
    problems: list[IntegrityProblem] = []
    checked = 0
    for row in rows:
        nid, cid, parent_id = row.id, row.conversation_id, row.parent_id
        parent_hash = row.parent_hash
        checked += 1

        def problem(message: str, nid: str = nid, cid: str = cid) -> None:
            problems.append(IntegrityProblem(message=message, node_id=nid, conversation_id=cid))

        if row.root_id is None:
            problem(f"node {nid} belongs to conversation {cid}, which does not exist")
            continue
        if parent_id is None:
            if nid != row.root_id:
                problem(f"node {nid} has no parent but is not the root of conversation {cid}")
                continue
            parent_hash = ""
        elif parent_hash is None:
            problem(f"node {nid}'s parent {parent_id} does not exist")
            continue
        elif row.parent_conversation_id != cid:
            problem(
                f"node {nid}'s parent {parent_id} is in another conversation "
                f"({row.parent_conversation_id})"
            )
            continue
        try:
            expected = row_hash(
                parent_hash, row.kind, row.turn, row.commands, row.label, row.created_at
            )
        except (ValueError, TypeError) as exc:
            problem(f"node {nid}'s stored data is not readable JSON ({exc})")
            continue
        if not row.hash:
            problem(f"node {nid} has no hash (was it inserted outside mp13?)")
        elif row.hash != expected:
            problem(f"node {nid} was altered outside mp13: its content does not match its hash")
    return IntegrityReport(checked=checked, problems=tuple(problems))
