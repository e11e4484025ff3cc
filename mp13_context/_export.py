# SPDX-License-Identifier: MIT
"""JSON export of a whole session, and reading an export back (through the package's converter).

The export is ``SessionData``: a format tag (``"mp13.session"``), a version and
every conversation with all its nodes (turns, commands, flags, ids and, since
version 2, each node's ``hash``). Effective states are not exported; import
recomputes them by folding the commands, so an export stays valid whatever the
state encoding. Importing (``Session.import_document``, validated as a whole
before anything is written; see ``_import``) keeps ids, so an exported and
re-imported session has identical trees, or gives fresh ids with
``new_ids=True``; it never changes an existing conversation.

Since version 3 each conversation also carries its saved positions
(``Session.save_position``: for each scope, the node its cursors resume at), so
an imported conversation resumes where each scope was; with ``new_ids=True``
they name the copies' nodes. Positions are not hashed (they move as cursors
move, like the ``archived`` and ``main_line`` flags); an import checks that each
names a node of its own conversation in the document, and an export leaves out one
that does not (only a file changed outside mp13 has such a row).

What a round trip does not keep: each node's ``seq`` (its place in the creation
order of the whole session) is numbered anew by the session it is imported into,
children keeping their order, so exporting the imported session gives the same
JSON but for ``seq``.

Since version 4 a tool result may carry its ``traceback`` (``ToolResult.traceback``:
where a failing tool raised, or where it was when it timed out). It is exported: an
export is the session as it was, every node vouched for by its hash, and a
traceback is part of its turn's content (dropping it would make every such node
read as edited). A traceback can name local paths (the tool's source files, the
Python install) and show source lines, never the values of local variables; the
model never saw it. Share an export as you would share those paths.

Versions: 1 (no hashes; still read, imported as unverified), 2 (nodes carry
``hash``; import checks them; still read: without positions, its conversations
resume at their newest node), 3 (conversations carry ``positions``; still read),
4 (tool results may carry ``traceback``).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any, Protocol

import attrs

from mp13_context._convert import unstructure
from mp13_context._errors import SerializationError
from mp13_context._import import FORMAT, VERSION
from mp13_context._model import ConversationInfo, Node, SavedPosition


class Exportable(Protocol):
    """What an export reads of a session (``Session`` is one)."""

    def conversations(self) -> list[ConversationInfo]: ...

    def conversation_nodes(self, conversation_id: str) -> list[Node]: ...

    def saved_positions(self, conversation_id: str) -> list[SavedPosition]: ...


@attrs.frozen(kw_only=True)
class ConversationData:
    """One exported conversation: its header, every node in creation order, and each
    scope's saved position (by scope name; since export version 3)."""

    info: ConversationInfo
    nodes: tuple[Node, ...] = ()
    positions: tuple[SavedPosition, ...] = ()


@attrs.frozen(kw_only=True)
class SessionData:
    """A whole exported session (``Session.export_json``): format tag, version, conversations."""

    format: str = FORMAT
    version: int = VERSION
    conversations: tuple[ConversationData, ...] = ()


def session_data(session: Exportable) -> SessionData:
    """The whole session as one value."""
    return SessionData(
        conversations=tuple(_conversation(session, info) for info in session.conversations())
    )


def _conversation(session: Exportable, info: ConversationInfo) -> ConversationData:
    nodes = tuple(session.conversation_nodes(info.id))
    ids = {n.id for n in nodes}
    # Only positions at one of the conversation's nodes: a row left pointing elsewhere in
    # a file damaged outside mp13 would make the import refuse the whole export.
    positions = tuple(p for p in session.saved_positions(info.id) if p.node_id in ids)
    return ConversationData(info=info, nodes=nodes, positions=positions)


def export_session(
    session: Exportable, path: str | os.PathLike[str], *, overwrite: bool = False
) -> None:
    name = os.fspath(path)
    if not name or os.path.isdir(name):  # overwrite=True cannot help: say what can
        raise SerializationError(
            f"cannot write session export {name!r}: give a file name"
            + (" in that folder" if name else "")
        )
    if not overwrite and os.path.lexists(name):
        raise SerializationError(_EXISTS.format(name=name))
    data = unstructure(session_data(session))
    tmp: str | None = None
    try:
        # A temporary file of our own beside the target (never a user's `NAME.tmp`), so
        # the target only ever holds a whole export; see `_publish` for the refusal.
        # ("x": created new, with the usual permissions, unlike mkstemp's owner-only.)
        draft = os.path.join(
            os.path.dirname(name), f".{os.path.basename(name)}.{uuid.uuid4().hex}.tmp"
        )
        with open(draft, "x", encoding="utf-8") as fh:
            tmp = draft
            json.dump(data, fh, ensure_ascii=False, indent=1)
        _publish(tmp, name, overwrite=overwrite)
    except FileExistsError as exc:  # appeared while the export was written
        raise SerializationError(_EXISTS.format(name=name)) from exc
    except (OSError, ValueError) as exc:  # ValueError: a name the file system cannot encode
        # The OS's words without the file it names, which may be our temporary one.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SerializationError(
            f"cannot write session export {name!r}: {reason}; check that its folder "
            "exists and can be written (the session itself is unchanged)"
        ) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


_EXISTS = (
    "{name!r} exists; an export never overwrites a file: pick a new file name, or pass "
    "overwrite=True to replace it (the session itself is unchanged)"
)


def _publish(tmp: str, name: str, *, overwrite: bool) -> None:
    """Give the written export its name: replacing a file only with ``overwrite``."""
    if overwrite:
        os.replace(tmp, name)
        return
    try:
        # A hard link fails if the name exists, even one created since the check above.
        os.link(tmp, name)
    except FileExistsError:
        raise
    except OSError:  # no hard links on this file system (FAT, some network shares)
        if os.path.lexists(name):
            raise FileExistsError(name) from None
        os.replace(tmp, name)


def read_document(path: str | os.PathLike[str]) -> Any:
    """The decoded JSON of an export file (validated by the import, not here)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except RecursionError as exc:
        raise SerializationError(
            f"cannot read session export {os.fspath(path)!r}: its JSON is nested too deeply "
            "to be an mp13 export",
            where="the document",
        ) from exc
    except (OSError, ValueError) as exc:
        raise SerializationError(
            f"cannot read session export {os.fspath(path)!r}: {exc}; check the file name, "
            "or export it again with Session.export_json"
        ) from exc
