# SPDX-License-Identifier: MIT
"""The app's position: its current cursor, session and conversation.

Small helpers shared by the commands so that each command stays one call into
``mp13_context`` plus rendering: reading where the cursor is, switching cursors,
conversations and sessions, and keeping the prompt label in step. The app holds one
*current* cursor; a try-out or a fork replaces it (a try-out remembers its origin).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mp13chat._errors import ChatError, UsageError
from mp13chat._tree import resolve_id, short

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


def conversation_id(app: ChatApp) -> str:
    return app.cursor.conversation_id


def tools_view(app: ChatApp) -> Any:
    """The resolved tools view at the cursor (all global modes when there is none)."""
    if app.cursor is None:
        return app.toolbox.view()
    return app.cursor.tools.view()


def tool_scopes(app: ChatApp) -> tuple[Any, ...]:
    return tuple(app.cursor.tools.show())


def prompt_label(app: ChatApp) -> str:
    """``[title-or-id @node]`` (``try`` inside a try-out), computed for every prompt."""
    cur = app.cursor
    if cur is None or app.session is None:
        return ""
    info = app.session.conversation(cur.conversation_id)
    name = info.title or short(info.id)
    if len(name) > 24:
        name = name[:23] + "…"
    extra = " try" if hasattr(cur, "promote") else ""
    return f"[{name}{extra} @{short(cur.node_id)}]"


def make_context(app: ChatApp) -> Any:
    """The app's ``ChatContext`` over its session, engine and toolbox, asking inline."""
    from mp13_context import ChatContext
    from mp13chat._reply import approve

    async def approval(request: Any) -> Any:
        return await approve(app, request)

    return ChatContext(app.session, engine=app.engine, toolbox=app.toolbox, approval=approval)


def new_conversation(app: ChatApp) -> Any:
    """A cursor in a new conversation with the config's system message and parameters."""
    cur = app.context.cursor()
    if app.config.system is not None:
        cur.system.set(app.config.system)
    if app.config.params:
        cur.params.set(**app.config.params)
    app.cursor = cur
    return cur


def find_conversation(app: ChatApp, key: str) -> str:
    """A conversation id from an id prefix or an exact (case-insensitive) title."""
    infos = app.session.conversations()
    titled = [c.id for c in infos if c.title and c.title.lower() == key.lower()]
    if len(titled) == 1:
        return titled[0]
    return resolve_id(key, [c.id for c in infos], "conversation")


def switch_to(app: ChatApp, conversation: str) -> None:
    app.cursor = app.context.cursor(conversation)


def find_node(app: ChatApp, key: str) -> str:
    """A node id from a prefix: this conversation first, then the whole session."""
    here = [n.id for n in app.session.conversation_nodes(conversation_id(app))]
    if any(i.startswith(key) for i in here):
        return resolve_id(key, here)
    every = [
        n.id for c in app.session.conversations() for n in app.session.conversation_nodes(c.id)
    ]
    return resolve_id(key, every)


def open_session(app: ChatApp, path: str) -> None:
    """Make the session at ``path`` current (closing one the app opened itself)."""
    from mp13_context import Session

    new = Session.open(path)
    old = app.session
    app.session = new
    app.own(new.close)
    app.context = make_context(app)
    conversations = new.conversations()
    if conversations:
        latest = max(conversations, key=lambda c: c.created_at)
        switch_to(app, latest.id)
    else:
        app.new_conversation()
    if old is not None and old is not new:
        app.release(old)


def copy_session(app: ChatApp, target: Path) -> None:
    """Write the whole session into a new SQLite file (through a JSON export)."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "session.json"
        app.session.export_json(dump)
        copy = type(app.session).import_json(dump, into=str(target))
        copy.close()


def require_tryout(app: ChatApp) -> Any:
    cur = app.cursor
    if not hasattr(cur, "promote"):
        raise UsageError("you are not in a try-out; /try opens one")
    return cur


def require_idle(app: ChatApp) -> None:
    if app.cursor is not None and app.cursor.running:
        raise ChatError("a reply is running; wait for it or press Ctrl+C")
