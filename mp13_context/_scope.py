# SPDX-License-Identifier: MIT
"""``ScopeState``: the runtime state one scope of a ``ChatContext`` shares with its cursors.

A ``ChatContext`` is the public face of one ``ScopeState``; every cursor it
makes, and every cursor those make (forks, clones, batch members, try-outs),
holds the same one. It carries the session, engine, toolbox and callbacks of
the scope and three registries:

- ``cursors``: the scope's live cursors (weakly held; a cursor adds itself);
- ``tryouts``: the open try-outs by hub id, oldest first;
- ``running``: request id -> the cancel function of the exchange that sent it.
  An id is in it exactly while its request is in flight (from the ``REQUEST``
  event until the response is in), so ``ChatContext.cancel(request_id)`` is one
  lookup, whichever cursor sent it.

None of this is stored in the session: it lives as long as the context.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mp13_context._errors import ContextError, ReadOnlyError, StoreError
from mp13_context._events import EventCallback
from mp13_context._protocol import EngineClient
from mp13_toolbox import Approver, Toolbox

if TYPE_CHECKING:  # pragma: no cover
    from mp13_context._session import Session


class ScopeState:
    """What a scope's cursors share (see the module docstring)."""

    def __init__(
        self,
        session: Session,
        engine: EngineClient | None,
        toolbox: Toolbox | None,
        *,
        name: str,
        approval: Approver | None,
        on_event: EventCallback | None,
    ) -> None:
        self.session = session
        self.engine = engine
        self.toolbox = toolbox
        self.name = name
        self.approval = approval
        self.on_event = on_event
        self.cursors: weakref.WeakSet[Any] = weakref.WeakSet()
        self.tryouts: dict[str, Any] = {}
        self.running: dict[str, Callable[[], bool]] = {}

    def require_engine(self) -> EngineClient:
        """The engine, or a ``ContextError`` that says how to attach one."""
        if self.engine is None:
            raise ContextError("no engine on this context; pass ChatContext(session, engine=...)")
        return self.engine

    def require_writable(self) -> None:
        """``StoreError`` (``ReadOnlyError`` for a read-only session) before any work whose
        result would have to be recorded."""
        if self.session.closed:
            raise StoreError(
                "this session is closed, so a reply could not be recorded; open it again "
                "with Session.open(path) and make a new ChatContext on it"
            )
        if self.session.read_only:
            raise ReadOnlyError(
                "this session was opened with read_only=True, so a reply could not be "
                "recorded; open it without read_only to ask, retry or continue"
            )
