# SPDX-License-Identifier: MIT
"""Tamper evidence for the stored effective settings (the second half of ``Session.verify``).

Node hashes (``_integrity``) cover what each node says, commands included. What the
session *serves* from, though, is each node's interned effective settings (the
``states`` row its ``state_id`` points at): the system prompt, adapters, tool scope
layers and parameters every request from that node uses. An edit of a ``states`` row,
or of a node's ``state_id``, changes those without touching any hashed content, so
``settings_problems`` folds every node's commands again from its parent's recomputed
settings (``_settings.apply``, with interning of its own) and reports each node whose
stored settings mean something else.

Invariants: reads rows only, never the session's caches; the ``*_prev`` undo links are
ids of the store's own interning, so only the meaning (``system``, ``adapters``,
``tool_scopes``, ``params``) is compared; a broken undo link still shows, at the node
whose pop then differs. Nodes whose parent is missing are left to the hash check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from mp13_context._convert import loads, structure
from mp13_context._integrity import IntegrityProblem
from mp13_context._interned import ScratchSettings
from mp13_context._model import Command
from mp13_context._settings import EffectiveSettings, apply

#: A row: node id, conversation id, parent id, commands JSON, the stored settings JSON
#: (``None`` when the node's ``state_id`` names no row).
SettingsRow = tuple[str, str, str | None, str | None, str | None]


def _meaning(settings: EffectiveSettings) -> tuple[object, ...]:
    return (settings.system, settings.adapters, settings.tool_scopes, settings.params)


def settings_problems(rows: Iterable[SettingsRow]) -> list[IntegrityProblem]:
    """Nodes (rows parents first) whose stored settings differ from their commands' fold."""
    table = ScratchSettings()
    folded: dict[str, int] = {}
    problems: list[IntegrityProblem] = []
    for nid, cid, parent_id, commands, stored in rows:
        sid = table.initial if parent_id is None else folded.get(parent_id)
        if sid is None:
            continue
        try:
            for raw in json.loads(commands) if commands else ():
                sid = table.intern(apply(table.get(sid), sid, structure(raw, Command), table.get))
            kept = loads(stored, EffectiveSettings) if stored is not None else None
        except Exception as exc:  # unreadable data is a finding too, never a crash
            problems.append(
                IntegrityProblem(
                    message=f"node {nid}'s commands or stored settings cannot be read ({exc})",
                    node_id=nid,
                    conversation_id=cid,
                )
            )
            continue
        folded[nid] = sid
        if kept is None or _meaning(kept) != _meaning(table.get(sid)):
            problems.append(
                IntegrityProblem(
                    message=(
                        f"node {nid}'s stored settings (system message, adapters, tool scopes, "
                        "parameters) were altered outside mp13: they differ from what its "
                        "commands say; export the conversation and import it again to rebuild "
                        "them, or restore a backup"
                    ),
                    node_id=nid,
                    conversation_id=cid,
                )
            )
    return problems
