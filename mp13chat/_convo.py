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


TITLE_LENGTH = 48


def title_from(text: str) -> str:
    """A conversation title from its first question: the first line, at most
    ``TITLE_LENGTH`` characters, cut at a word."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if len(line) <= TITLE_LENGTH:
        return line
    cut = line[: TITLE_LENGTH - 1]
    mid_word = line[len(cut)] != " "
    if mid_word and " " in cut[TITLE_LENGTH // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


def title_if_untitled(app: ChatApp, question: str) -> None:
    """Name the current conversation after ``question`` unless it has a title."""
    cid = conversation_id(app)
    if not app.session.conversation(cid).title:
        title = title_from(question)
        if title:
            app.session.set_title(cid, title)


def _first_missing(app: ChatApp, names: Any) -> tuple[str, str, str] | None:
    """(name, loaded names, how to load it) for the first of ``names`` not loaded."""
    from mp13_engine import BASE_ADAPTER

    manager = getattr(app.engine, "adapters", None)
    if manager is None or not names:
        return None
    missing = [n for n in names if n != BASE_ADAPTER and n not in manager]
    if not missing:
        return None
    name = missing[0]
    loaded = ", ".join(a.name for a in manager.list()) or "none"
    saved = app.adapters_dir is not None and (app.adapters_dir / name).is_dir()
    return name, loaded, f"/adapters load {name}" if saved else f"/adapters load PATH {name}"


def require_loaded(app: ChatApp, names: Any) -> None:
    """``ChatError`` in REPL terms unless every adapter in ``names`` is loaded."""
    found = _first_missing(app, names)
    if found is not None:
        name, loaded, how = found
        raise ChatError(
            f"no adapter named {name!r} is loaded (loaded: {loaded}); {how} loads it, "
            "/train start trains one"
        )


def check_branch_adapters(app: ChatApp) -> None:
    """Before a reply: the adapters this branch uses must be loaded (say how, if not)."""
    found = _first_missing(app, app.cursor.adapters.show())
    if found is not None:
        name, loaded, how = found
        raise ChatError(
            f"this branch uses adapter {name!r}, which is not loaded (loaded: {loaded}); "
            f"{how} loads it, /adapters base answers with the base model"
        )


def require_tryout(app: ChatApp) -> Any:
    cur = app.cursor
    if not hasattr(cur, "promote"):
        raise UsageError("you are not in a try-out; /try opens one")
    return cur
