# SPDX-License-Identifier: MIT
"""The context layer's branch of mp13's exception tree (root: ``Mp13Error``).

::

    Mp13Error                        (mp13_toolbox)
    └── ContextError
        ├── ContextKeywordError      a misspelt ImportLimits keyword (also
        │                            mp13_toolbox.UnknownKeywordError, a TypeError)
        ├── NotFoundError            a conversation, node or cursor id that does not exist
        ├── CursorError              an operation that does not fit the cursor's position
        │                            (no parent, nothing to retry, closed try-out, ...)
        ├── CommandError             a command that cannot apply (unknown parameter, nothing to pop)
        ├── StoreError               SQLite failed, or the file is not an mp13 session
        │   ├── SchemaError          the file has migrations this version does not know
        │   └── ReadOnlyError        a write to a session opened with read_only=True
        └── SerializationError       an export that cannot be read or written, or JSON
            │                        of the wrong shape (``where`` names the place: a
            │                        path in the document, a node id)
            ├── ImportConflictError  imported ids that already exist in the session
            └── TamperedError        imported content that does not match its hashes

Engine and tool failures during a turn never raise: they are recorded on the turn
(``Turn.error``) so nothing is lost. SQLite errors are mapped at the store
boundary with ``raise ... from exc``. Every message says what went wrong and
what to do about it.
"""

from __future__ import annotations

from mp13_toolbox import Mp13Error, UnknownKeywordError


class ContextError(Mp13Error):
    """Base of the context layer's errors."""


class ContextKeywordError(ContextError, UnknownKeywordError):
    """A keyword ``ImportLimits`` has no field for; the message names the closest one.

    Also a ``TypeError``, which is what such a call raised before.
    """


class NotFoundError(ContextError, KeyError):
    """A conversation, node or cursor id that does not exist in this session."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class CursorError(ContextError, ValueError):
    """The operation does not fit where the cursor is (or the cursor is closed)."""


class CommandError(ContextError, ValueError):
    """A command cannot apply: unknown parameter, bad value, nothing to pop."""


class StoreError(ContextError):
    """The SQLite store failed or the file is not an mp13 session."""


class SchemaError(StoreError):
    """The store's schema is newer than this version of mp13 knows."""


class ReadOnlyError(StoreError):
    """A write to a session opened with ``read_only=True``."""


class SerializationError(ContextError, ValueError):
    """An export cannot be read or written, or its JSON is not the shape of an mp13 session.

    ``where`` names the place when it is known: a path in the document such as
    ``conversations[0].nodes[3].turn.text``, with the node id.
    """

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where


class ImportConflictError(SerializationError):
    """An import would reuse conversation or node ids that this session already has."""


class TamperedError(SerializationError):
    """An imported document's content does not match its hashes (it was edited)."""
