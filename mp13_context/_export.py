# SPDX-License-Identifier: MIT
"""JSON export and import of a whole session (through the package's cattrs converter).

The export is ``SessionData``: a format tag, a version and every conversation
with all its nodes (turns, commands, flags, ids). Effective states are not
exported; import recomputes them by folding the commands, so an export stays
valid whatever the state encoding. Import keeps ids, so an exported and
re-imported session has identical trees; importing a conversation id that
already exists is refused, unless ``new_ids=True`` asks for copies under fresh ids.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import attrs

from mp13_context._convert import structure, unstructure
from mp13_context._errors import SerializationError
from mp13_context._model import ConversationInfo, Node, new_id

if TYPE_CHECKING:  # pragma: no cover
    from mp13_context._session import Session

FORMAT = "mp13.session"
VERSION = 1


@attrs.frozen(kw_only=True)
class ConversationData:
    info: ConversationInfo
    nodes: tuple[Node, ...] = ()


@attrs.frozen(kw_only=True)
class SessionData:
    format: str = FORMAT
    version: int = VERSION
    conversations: tuple[ConversationData, ...] = ()


def session_data(session: Session) -> SessionData:
    """The whole session as one value."""
    return SessionData(
        conversations=tuple(
            ConversationData(info=info, nodes=tuple(session.conversation_nodes(info.id)))
            for info in session.conversations()
        )
    )


def export_session(session: Session, path: str | os.PathLike[str]) -> None:
    data = unstructure(session_data(session))
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=1)
    os.replace(tmp, path)  # never leave a half-written export behind


def load_data(path: str | os.PathLike[str]) -> SessionData:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SerializationError(f"cannot read session export {os.fspath(path)!r}: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SerializationError(
            f"{os.fspath(path)!r} is not an mp13 session export (format {FORMAT!r} expected)"
        )
    if raw.get("version", 0) > VERSION:
        raise SerializationError(
            f"{os.fspath(path)!r} has export version {raw['version']}; this mp13 reads up to "
            f"{VERSION}: upgrade mp13"
        )
    return structure(raw, SessionData)


def _with_new_ids(conv: ConversationData) -> ConversationData:
    """A copy of ``conv`` under fresh conversation and node ids (same shape)."""
    ids = {n.id: new_id() for n in conv.nodes}
    cid = new_id()
    nodes = tuple(
        attrs.evolve(
            n,
            id=ids[n.id],
            conversation_id=cid,
            parent_id=ids.get(n.parent_id) if n.parent_id is not None else None,
        )
        for n in conv.nodes
    )
    info = attrs.evolve(conv.info, id=cid, root_id=ids[conv.info.root_id], head_id=None)
    return ConversationData(info=info, nodes=nodes)


def import_data(session: Session, data: SessionData, *, new_ids: bool = False) -> list[str]:
    """Insert every conversation of ``data``; return their ids in ``session``."""
    out = []
    for conv in data.conversations:
        if new_ids:
            conv = _with_new_ids(conv)
        session._insert_imported(conv.info, list(conv.nodes))
        out.append(conv.info.id)
    return out


def import_session(
    session: Session, path: str | os.PathLike[str], *, new_ids: bool = False
) -> list[str]:
    return import_data(session, load_data(path), new_ids=new_ids)
