# SPDX-License-Identifier: MIT
"""Nodes as stored rows, and back: JSON columns, text clean-up, parameter checks, hashes.

Invariants:

- A row holds exactly what the node returned to the caller holds: lone
  surrogates are replaced (``_text``) and each command's fields are checked
  (``_settings.checked_fields``: the type its kind uses, ``params.set`` values
  as the live command validates them) *before* the node value is built, so
  nothing is read back different from what was handed out.
- ``hash`` is computed from the row's own JSON texts (``_integrity.row_hash``),
  so ``Session.verify`` recomputes it from the row alone.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from mp13_context._convert import dumps, loads, structure, unstructure
from mp13_context._errors import CommandError
from mp13_context._integrity import row_hash
from mp13_context._model import Command, Node, NodeKind, Turn
from mp13_context._settings import checked_fields
from mp13_context._store import NodeRow
from mp13_context._text import has_surrogates, scrub


def _json(data: Any) -> tuple[str, bool]:
    """Stored JSON text (``dumps``) with lone surrogates replaced, and whether any was."""
    text = dumps(data)
    return (scrub(text), True) if has_surrogates(text) else (text, False)


def stored_turn(turn: Turn | None) -> tuple[Turn | None, str | None]:
    """The turn as it will be stored (no ``node_id``), and its JSON text."""
    if turn is None:
        return None, None
    turn = attrs.evolve(turn, node_id=None)
    text, scrubbed = _json(turn)
    return (loads(text, Turn) if scrubbed else turn), text


def stored_commands(commands: tuple[Command, ...]) -> tuple[tuple[Command, ...], str | None]:
    """The commands as they will be stored, and their JSON text (``None`` for none).

    ``CommandError`` for a field its kind cannot use (see ``checked_fields``), or data
    that is not JSON.
    """
    commands = tuple(checked_fields(c) for c in commands)
    if not commands:
        return commands, None
    try:
        text, scrubbed = _json([unstructure(c) for c in commands])
    except (TypeError, ValueError) as exc:  # free-form data: record_call's keywords
        raise CommandError(
            f"record_call data must be JSON values (str, numbers, bools, None, lists, "
            f"dicts with str keys): {exc}"
        ) from exc
    if scrubbed:
        commands = tuple(structure(c, Command) for c in json.loads(text))
    return commands, text


def check_new_commands(commands: tuple[Command, ...]) -> None:
    """``CommandError`` for a command a caller records now whose free-form data holds
    NaN or an infinity (``record_call(x=float("nan"))``).

    Python's ``json`` writes those as ``NaN``/``Infinity``, which are not JSON: the
    session's export would then be a file that other JSON readers refuse. Only new
    commands: one already stored (or in an export being imported) is kept as it is.
    """
    for cmd in commands:
        if not isinstance(cmd, Command) or not cmd.data:  # not a Command: stored_commands says so
            continue
        try:
            json.dumps(cmd.data, allow_nan=False)
        except ValueError as exc:
            raise CommandError(
                f"record_call data must be JSON values, and NaN and infinities are not JSON "
                f"({exc}; other programs could not read the session's export): record such "
                f"a number as a string, e.g. {{'scale': 'nan'}}"
            ) from exc
        except TypeError:  # not JSON at all: stored_commands says so
            pass


def node_row(
    node: Node, state_id: int, parent_hash: str, turn: str | None, commands: str | None
) -> tuple[dict[str, Any], Node]:
    """The row for ``node``, whose turn and commands are stored as the JSON texts given,
    and the node with its hash (``parent_hash``: ``""`` for a root)."""
    digest = row_hash(parent_hash, node.kind.value, turn, commands, node.label, node.created_at)
    row = {
        "id": node.id,
        "conversation_id": node.conversation_id,
        "parent_id": node.parent_id,
        "kind": node.kind.value,
        "depth": node.depth,
        "turn": turn,
        "commands": commands,
        "archived": int(node.archived),
        "main_line": int(node.main_line),
        "label": node.label,
        "created_at": node.created_at,
        "state_id": state_id,
        "hash": digest,
    }
    return row, attrs.evolve(node, hash=digest)


def node_from_row(r: NodeRow) -> Node:
    return Node(
        id=r.id,
        conversation_id=r.conversation_id,
        parent_id=r.parent_id,
        kind=NodeKind(r.kind),
        depth=r.depth,
        seq=r.seq,
        turn=loads(r.turn, Turn) if r.turn else None,
        commands=tuple(structure(c, Command) for c in json.loads(r.commands)) if r.commands else (),
        archived=bool(r.archived),
        main_line=bool(r.main_line),
        label=r.label,
        created_at=r.created_at,
        hash=r.hash,
    )
