# SPDX-License-Identifier: MIT
"""``ChatContext``: a session plus an engine, a toolbox and a *scope*.

A scope is the namespace of one app component. Several components can share a
session (and an engine) through their own ``ChatContext``s with different scope
names: each has its own cursors, its own open try-outs and its own saved
position per conversation, and closing or listing them never touches another
scope's. The tree itself is shared: a branch one scope makes is visible to all,
but no scope's cursors move because of another's work.

The approval callback (for tools whose policy is ``ask``) and the default event
callback are runtime settings of a context; they are never stored in the
session, and neither are the toolbox's remembered permissions. The tools
commands a session does store are scope layers, which can only narrow the
toolbox's own modes; so continuing or replaying saved or imported data cannot
widen what tools may do.
"""

from __future__ import annotations

import weakref
from typing import Any

from mp13_context._cursor import Cursor, TryOut
from mp13_context._events import EventCallback
from mp13_context._protocol import EngineClient
from mp13_context._session import Session


class ChatContext:
    """Cursors over ``session`` that run turns on ``engine`` with ``toolbox``.

    ``approval``: the toolbox approver for ``ask``-policy tools (sync or async;
    see ``mp13_toolbox``). ``on_event``: default event callback for every turn
    run through this context (streams replies when set).
    """

    def __init__(
        self,
        session: Session,
        engine: EngineClient | None = None,
        toolbox: Any = None,
        *,
        scope: str = "default",
        approval: Any = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self.session = session
        self.engine = engine
        self.toolbox = toolbox
        self.scope = scope
        self.approval = approval
        self.on_event = on_event
        self._cursors: weakref.WeakSet[Cursor] = weakref.WeakSet()
        self._tryouts: dict[str, TryOut] = {}

    def __repr__(self) -> str:
        return f"<ChatContext scope={self.scope!r} session={self.session.filename!r}>"

    def with_scope(self, scope: str) -> ChatContext:
        """A context for another app component: same session, engine, toolbox and
        callbacks; its own cursors, try-outs and saved positions."""
        return ChatContext(
            self.session,
            self.engine,
            self.toolbox,
            scope=scope,
            approval=self.approval,
            on_event=self.on_event,
        )

    # --- cursors -----------------------------------------------------------------------

    def cursor(
        self, conversation_id: str | None = None, *, at: str | None = None, title: str = ""
    ) -> Cursor:
        """A cursor: at node ``at``; else in ``conversation_id`` where this scope last
        was (or at the conversation's newest node), but never inside an archived
        branch such as a closed try-out (``Session.resume_point``); else in a new
        conversation."""
        if at is not None:
            self.session.node(at)
            return self._register(Cursor(self, at))
        if conversation_id is None:
            info = self.session.new_conversation(title)
            return self._register(Cursor(self, info.root_id, own_tip=info.root_id))
        return self._register(Cursor(self, self.session.resume_point(self.scope, conversation_id)))

    def cursors(self) -> list[Cursor]:
        """This scope's live cursors (try-outs included)."""
        return list(self._cursors)

    def tryouts(self) -> list[TryOut]:
        """This scope's open try-outs, oldest first."""
        return list(self._tryouts.values())

    def close_tryouts(self) -> int:
        """Close (archive) every open try-out of this scope; returns how many."""
        open_ = self.tryouts()
        for t in open_:
            t.close()
        return len(open_)

    def cancel(self, request_id: str) -> bool:
        """Cancel a request by the id its ``REQUEST`` event carried; True if it was running.

        Prefer this to ``engine.cancel(id)`` for requests of this context: a batch
        member that still waits for the rest of its batch is not in the engine yet.
        """
        for cursor in self.cursors():
            if cursor._request_id == request_id:
                return cursor.cancel()
        return bool(self.engine is not None and self.engine.cancel(request_id))

    def cancel_all(self) -> int:
        """Cancel the running request of every cursor of this scope; returns how many."""
        return sum(c.cancel() for c in self.cursors())

    # --- used by cursors ---------------------------------------------------------------

    def _register(self, cursor: Cursor) -> Cursor:
        self._cursors.add(cursor)
        return cursor

    def _remember(self, cursor: Cursor) -> None:
        """Save the cursor's position as this scope's place in its conversation."""
        node = cursor.node
        self.session.save_position(self.scope, node.conversation_id, node.id)

    def _open_tryout(self, tryout: TryOut) -> None:
        self._register(tryout)
        self._tryouts[tryout.hub_id] = tryout

    def _close_tryout(self, tryout: TryOut) -> None:
        self._tryouts.pop(tryout.hub_id, None)
