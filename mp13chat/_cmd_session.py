# SPDX-License-Identifier: MIT
"""Conversations and the session: list, new, switch, title, search, save, open,
export, import.

A session is a SQLite file saved as you go (every turn in its own transaction), so
there is nothing to "save" in the usual sense: ``/save FILE`` writes a *copy* of the
session into another file, ``/open FILE`` switches to another session file,
``/export``/``/import`` move conversations through JSON.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from mp13chat import _convo as convo
from mp13chat import _render as render
from mp13chat._completer import complete_paths
from mp13chat._errors import UsageError
from mp13chat._registry import Command, CommandLine, command
from mp13chat._tree import short

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


def _complete_conversations(app: ChatApp, index: int, words: list[str]) -> list[str]:
    if index != 0 or app.session is None:
        return []
    return [short(c.id) for c in app.session.conversations()]


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


@command("list", group="conversations", aliases=("ls",))
def list_(app: ChatApp, line: CommandLine) -> None:
    """List the conversations of this session (the current one is marked)."""
    current = convo.conversation_id(app)
    rows = []
    for info in app.session.conversations():
        mark = Text("▶", style="mp13.ok") if info.id == current else ""
        rows.append((mark, short(info.id), info.title or "(untitled)", _when(info.created_at)))
    app.console.print(render.table("conversations", ("", "id", "title", "created"), rows))


@command("new", group="conversations", usage="/new [TITLE]")
def new(app: ChatApp, line: CommandLine) -> None:
    """Start a new conversation (with the config's system message and parameters)."""
    app.new_conversation()
    if line.text:
        app.session.set_title(convo.conversation_id(app), line.text)
    render.print_ok(app.console, f"new conversation {short(convo.conversation_id(app))}")


@command(
    "switch", group="conversations", usage="/switch ID|TITLE", complete=_complete_conversations
)
def switch(app: ChatApp, line: CommandLine) -> None:
    """Switch to another conversation (id prefix or exact title), at its last position."""
    cid = convo.find_conversation(app, line.require_text("a conversation id or title"))
    convo.switch_to(app, cid)
    render.print_ok(app.console, f"switched to {short(cid)}")


@command("title", group="conversations", usage="/title TEXT")
def title(app: ChatApp, line: CommandLine) -> None:
    """Set the title of the current conversation."""
    app.session.set_title(convo.conversation_id(app), line.require_text("a title"))


@command("search", group="session", usage="/search WORDS")
def search(app: ChatApp, line: CommandLine) -> None:
    """Full-text search over every message of the session; /goto a hit's node."""
    hits = app.session.search(line.require_text("words to search for"))
    if not hits:
        render.print_info(app.console, "no matches")
        return
    rows = [
        (
            short(h.conversation_id),
            h.title or "",
            short(h.node_id),
            h.role.value,
            render.highlight_snippet(h.snippet),
        )
        for h in hits
    ]
    app.console.print(
        render.table(f"{len(hits)} matches", ("conv", "title", "node", "role", "snippet"), rows)
    )


@command("save", group="session", usage="/save [FILE]", complete=complete_paths)
def save(app: ChatApp, line: CommandLine) -> None:
    """Without FILE: say where the session is saved (it saves as you go).
    With FILE: write a copy of the whole session into FILE (a new SQLite file)."""
    if not line.text:
        where = app.session.filename
        if where == ":memory:":
            render.print_warning(app.console, "this session is in memory only: /save FILE keeps it")
        else:
            render.print_ok(app.console, f"saved as you go in {where}")
        return
    target = Path(line.text).expanduser()
    if target.exists():
        raise UsageError(f"{target} exists; pick a new file name (a copy never overwrites)")
    convo.copy_session(app, target)
    render.print_ok(app.console, f"session copied to {target}; /open {target} to use it")


@command("open", group="session", usage="/open FILE", complete=complete_paths)
def open_(app: ChatApp, line: CommandLine) -> None:
    """Open another session file (created if missing); goes to its latest conversation."""
    path = Path(line.require_text("a session file")).expanduser()
    convo.open_session(app, str(path))
    render.print_ok(app.console, f"session {path}")
    list_.func(app, CommandLine())


@command("export", group="session", usage="/export FILE.json", complete=complete_paths)
def export(app: ChatApp, line: CommandLine) -> None:
    """Export the whole session (every conversation and branch) as JSON."""
    path = Path(line.require_text("a file name")).expanduser()
    app.session.export_json(path)
    render.print_ok(app.console, f"exported to {path}")


@command("import", group="session", usage="/import FILE.json", complete=complete_paths)
def import_(app: ChatApp, line: CommandLine) -> None:
    """Import the conversations of a JSON export into this session."""
    path = Path(line.require_text("a file name")).expanduser()
    type(app.session).import_json(path, into=app.session)
    render.print_ok(app.console, f"imported {path}")
    list_.func(app, CommandLine())


COMMANDS: tuple[Command, ...] = (list_, new, switch, title, search, save, open_, export, import_)
