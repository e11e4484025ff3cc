# SPDX-License-Identifier: MIT
"""JSON export and import of a whole session (through the package's cattrs converter).

The export is ``SessionData``: a format tag, a version and every conversation
with all its nodes (turns, commands, flags, ids). Effective states are not
exported; import recomputes them by folding the commands, so an export stays
valid whatever the state encoding. Import keeps ids, so an exported and
re-imported session has identical trees; importing a conversation id that
already exists is refused.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import attrs

from mp13_context._convert import structure, unstructure
from mp13_context._errors import SerializationError
from mp13_context._model import ConversationInfo, Node

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


def import_data(session: Session, data: SessionData) -> None:
    for conv in data.conversations:
        session._insert_imported(conv.info, list(conv.nodes))


def import_session(session: Session, path: str | os.PathLike[str]) -> None:
    import_data(session, load_data(path))
