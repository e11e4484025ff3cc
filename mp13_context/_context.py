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

Threads: a session, its contexts and one engine may be shared by several
threads, each asking through a cursor of its own (each sync call runs on a
loop of its own, see ``_sync``; the store runs all SQL under one lock). A
cursor runs one exchange at a time: a call that would start a second one,
from any thread, raises ``CursorError`` and records nothing.
"""

from __future__ import annotations

from mp13_context._cursor import Cursor, TryOut
from mp13_context._errors import ContextError
from mp13_context._events import EventCallback, check_callback
from mp13_context._protocol import EngineClient
from mp13_context._scope import ScopeState
from mp13_context._session import Session
from mp13_toolbox import Approver, Toolbox


class ChatContext:
    """Cursors over ``session`` that run turns on ``engine`` with ``toolbox``.

    ``approval``: the toolbox approver for ``ask``-policy tools (sync or async;
    see ``mp13_toolbox``). ``on_event``: default event callback for every turn
    run through this context (streams replies when set). All of them are shared
    with the context's cursors (``_scope.ScopeState``). ``scope``: the name under
    which this context saves its place in each conversation and keeps its
    try-outs (``with_scope`` makes a context for another name). ``engine=None``
    and ``toolbox=None`` leave a context that reads and records, but cannot ask,
    and offers no tools.
    """

    def __init__(
        self,
        session: Session,
        engine: EngineClient | None = None,
        toolbox: Toolbox | None = None,
        *,
        scope: str = "default",
        approval: Approver | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        _check_parts(session, engine, toolbox, scope)
        check_callback(approval, "approval")
        check_callback(on_event, "on_event")
        self._state = ScopeState(
            session, engine, toolbox, name=scope, approval=approval, on_event=on_event
        )

    def __repr__(self) -> str:
        return f"<ChatContext scope={self.scope!r} session={self.session.filename!r}>"

    @property
    def session(self) -> Session:
        """The session every cursor of this context records into."""
        return self._state.session

    @property
    def engine(self) -> EngineClient | None:
        """The engine replies come from (None: reading and recording only)."""
        return self._state.engine

    @property
    def toolbox(self) -> Toolbox | None:
        """The toolbox tool calls run in (None: replies get no tools)."""
        return self._state.toolbox

    @property
    def scope(self) -> str:
        """This context's scope name: its saved positions and try-outs are its own."""
        return self._state.name

    @property
    def approval(self) -> Approver | None:
        """The callback asked before a tool that needs approval runs (None: refused)."""
        return self._state.approval

    @property
    def on_event(self) -> EventCallback | None:
        """The default ``Event`` callback of this context's exchanges (an ``on_event=``
        given to ``ask`` and the like replaces it for that exchange)."""
        return self._state.on_event

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
            return Cursor(self._state, at)
        if conversation_id is None:
            info = self.session.new_conversation(title)
            return Cursor(self._state, info.root_id, command_node=info.root_id)
        return Cursor(self._state, self.session.resume_point(self.scope, conversation_id))

    def cursors(self) -> list[Cursor]:
        """This scope's live cursors (try-outs included)."""
        return [c for c in self._state.cursors if isinstance(c, Cursor)]

    def tryouts(self) -> list[TryOut]:
        """This scope's open try-outs, oldest first."""
        return [t for t in self._state.tryouts.values() if isinstance(t, TryOut)]

    def close_tryouts(self) -> int:
        """Close (archive) every open try-out of this scope; returns how many."""
        open_ = self.tryouts()
        for t in open_:
            t.close()
        return len(open_)

    def cancel(self, request_id: str) -> bool:
        """Cancel a request by the id its ``REQUEST`` event carried; True if it was running.

        Prefer this to ``engine.cancel(id)`` for requests of this context: a request
        still on its way to the engine (its ``REQUEST`` event's callback is running)
        is never sent. Ids this context did not send go to ``engine.cancel``.
        """
        cancel = self._state.running.get(request_id)
        if cancel is not None:
            return cancel()
        return bool(self.engine is not None and self.engine.cancel(request_id))

    def cancel_all(self) -> int:
        """Cancel the running request of every cursor of this scope; returns how many."""
        return sum(cancel() for cancel in list(self._state.running.values()))


def _check_parts(session: object, engine: object, toolbox: object, scope: object) -> None:
    """What a context is built from, checked at once instead of at the first request."""
    if not isinstance(session, Session):
        raise ContextError(
            f"ChatContext needs a Session, not {type(session).__name__}; "
            "open one with Session.open(path) (':memory:' for no file)"
        )
    if engine is not None and not isinstance(engine, EngineClient):
        raise ContextError(
            f"engine must be an mp13_engine.Engine or another EngineClient (agenerate, "
            f"astream, cancel, format_prompt, count_tokens), not {type(engine).__name__}"
        )
    if toolbox is not None and not isinstance(toolbox, Toolbox):
        raise ContextError(f"toolbox must be an mp13_toolbox.Toolbox, not {type(toolbox).__name__}")
    if not isinstance(scope, str) or not scope:
        raise ContextError(f"a scope is a non-empty name (a str), not {scope!r}")
