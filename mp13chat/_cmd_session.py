# SPDX-License-Identifier: MIT
"""Conversations and the session: list, new, switch, title, search, save, open,
export, import.

A session is a SQLite file saved as you go (every turn in its own transaction), so
there is nothing to "save" in the usual sense: ``/save FILE`` writes a *copy* of the
session into another file, ``/open FILE`` switches to another session file,
``/export``/``/import`` move conversations through JSON, with the node the REPL was
at in each (its saved position: ``/list`` shows it, ``/switch`` resumes there). An
import never changes a conversation the session has: a file holding ids the session
already has (its own export, say) is refused unless ``/import FILE copy`` asks for
copies under new ids.
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path

from rich.text import Text

from mp13_context import ImportConflictError, SerializationError, Session
from mp13_toolbox import plural
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._completer import complete_paths
from mp13chat._errors import ChatError, UsageError
from mp13chat._registry import ArgCompleter, Command, CommandLine, command
from mp13chat._repl import Repl
from mp13chat._tree import short

COPY = "copy"
OVERWRITE = "overwrite"
_API_HINT = "import only files written by Session.export_json"
_REPL_HINT = "import only files that /export (or Session.export_json) wrote"


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def _print_conversations(repl: Repl, line: CommandLine | None = None) -> None:
    """List the conversations of this session (the current one is marked) and the node
    each one is at: where /switch resumes it (its saved position, kept by /export and
    /import), or the current cursor's."""
    current = repl.cursor
    rows = []
    for info in repl.session.conversations():
        here = info.id == current.conversation_id
        mark = Text("▶", style="mp13.ok") if here else ""
        at = current.node_id if here else repl.session.resume_point(repl.context.scope, info.id)
        rows.append(
            (mark, short(info.id), info.title or "(untitled)", short(at), _when(info.created_at))
        )
    repl.console.print(render.table("conversations", ("", "id", "title", "at", "created"), rows))


# /open and /import list them too: the command is the printer itself.
list_: Command[Repl] = command("list", group="conversations", aliases=("ls",))(_print_conversations)


@command("new", group="conversations", usage="/new [TITLE]")
def new(repl: Repl, line: CommandLine) -> None:
    """Start a new conversation (with the config's system message and parameters)."""
    cid = repl.new_conversation().conversation_id
    if line.text:
        repl.session.set_title(cid, line.text)
    render.print_ok(repl.console, f"new conversation {short(cid)}")


@command(
    "switch",
    group="conversations",
    usage="/switch ID|TITLE",
    complete=position.complete_conversations,
)
def switch(repl: Repl, line: CommandLine) -> None:
    """Switch to another conversation (id prefix or exact title), at its last position."""
    cid = position.find_conversation(repl, line.require_text("a conversation id or title"))
    repl.cursor = repl.context.cursor(cid)
    render.print_ok(repl.console, f"switched to {short(cid)} at {short(repl.cursor.node_id)}")


@command("title", group="conversations", usage="/title TEXT")
def title(repl: Repl, line: CommandLine) -> None:
    """Set the title of the current conversation."""
    text = line.require_text("a title")
    repl.session.set_title(repl.cursor.conversation_id, text)
    render.print_ok(repl.console, f"title set: {text}")


@command("search", group="session", usage="/search WORDS")
def search(repl: Repl, line: CommandLine) -> None:
    """Full-text search over every message of the session; /goto a hit's node."""
    hits = repl.session.search(line.require_text("words to search for"))
    if not hits:
        render.print_info(repl.console, "no matches")
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
    repl.console.print(
        render.table(
            plural(len(hits), "match", "matches"),
            ("conv", "title", "node", "role", "snippet"),
            rows,
        )
    )


def _writable(path: Path) -> Path:
    """``path``, or a ``UsageError`` when its folder is missing (checked before writing,
    so the message says what to do rather than quoting the OS error)."""
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(
            f"the folder {str(folder)!r} does not exist; create it first or pick another path"
        )
    if path.is_dir():
        raise UsageError(f"{str(path)!r} is a folder; give a file name in it")
    return path


@command("save", group="session", usage="/save [FILE]", complete=complete_paths)
def save(repl: Repl, line: CommandLine) -> None:
    """Without FILE: say where the session is saved (it saves as you go).

    With FILE: write a copy of the whole session into FILE (a new SQLite file)."""
    if not line.text:
        where = repl.session.filename
        if where == ":memory:":
            render.print_warning(
                repl.console, "this session is in memory only: /save FILE keeps it"
            )
        else:
            render.print_ok(repl.console, f"saved as you go in {where}")
        return
    target = _writable(Path(line.text).expanduser())
    repl.session.save_copy(target)
    render.print_ok(repl.console, f"session copied to {target}; /open {target} to use it")


@command("open", group="session", usage="/open FILE", complete=complete_paths)
def open_(repl: Repl, line: CommandLine) -> None:
    """Open another session file (created if missing); goes to its latest conversation."""
    path = Path(line.require_text("a session file")).expanduser()
    repl.open_session(str(path))
    render.print_ok(repl.console, f"session {path}")
    _print_conversations(repl)


def _file_then(word: str) -> ArgCompleter[Repl]:
    """Completion of ``FILE [word]``: a path, then the one optional ``word``."""

    def complete(repl: Repl, index: int, words: list[str]) -> list[str]:
        return complete_paths(repl, index, words) if index == 0 else [word] if index == 1 else []

    return complete


@command(
    "export", group="session", usage="/export FILE.json [overwrite]", complete=_file_then(OVERWRITE)
)
def export(repl: Repl, line: CommandLine) -> None:
    """Export the whole session (every conversation and branch) as JSON. A file that
    exists is kept (as /save keeps one) unless 'overwrite' asks to replace it."""
    text = line.require_text("a file name")
    # Without the word the whole text is the name, as before: spaces and quotes in it
    # need no quoting; with it, the name is one shell-like word.
    words = line.words if text.rpartition(" ")[2] == OVERWRITE else []
    if len(words) > 2:
        raise UsageError(f'quote a file name with spaces: /export "my file.json" {OVERWRITE}')
    replace = len(words) == 2
    path = _writable(Path(words[0] if replace else text).expanduser())
    if not replace and (path.exists() or path.is_symlink()):
        raise UsageError(
            f"{str(path)!r} exists, so nothing was written; pick a new file name, or "
            f"/export {shlex.quote(str(path))} {OVERWRITE} to replace it"
        )
    repl.session.export_json(path, overwrite=replace)
    render.print_ok(repl.console, f"exported to {path}")


@command("import", group="session", usage="/import FILE.json [copy]", complete=_file_then(COPY))
def import_(repl: Repl, line: CommandLine) -> None:
    """Import the conversations of a JSON export into this session, as new
    conversations. A file whose conversations this session already has (its own export,
    say) imports only with 'copy': copies under new ids, the originals untouched. Each
    conversation keeps the node it was at (the list's 'at'; /switch goes there); this
    one stays current."""
    words = line.words
    if len(words) not in (1, 2) or words[1:] not in ([], [COPY]):
        raise UsageError("give the export file, and 'copy' to import copies under new ids")
    path = Path(words[0]).expanduser()
    if not path.is_file():
        # The store's own message suggests an API call; a REPL user wants the command.
        raise UsageError(f"no file {str(path)!r}; /export FILE.json writes one from a session")
    copies = words[1:] == [COPY]
    before = len(repl.session.conversations())
    try:
        Session.import_json(path, into=repl.session, new_ids=copies)
    except ImportConflictError as exc:
        raise ChatError(
            f"{path} holds conversations this session already has, so nothing was "
            f"imported; /import {shlex.quote(words[0])} copy imports them as copies under new ids"
        ) from exc
    except SerializationError as exc:
        # The context layer's hint names its API; in the REPL the writer is /export.
        message = str(exc)
        if message.endswith(_API_HINT):
            raise ChatError(message.removesuffix(_API_HINT) + _REPL_HINT) from exc
        raise
    added = len(repl.session.conversations()) - before
    what = "copies of " if copies else ""
    render.print_ok(repl.console, f"imported {what}{plural(added, 'conversation')} from {path}")
    _print_conversations(repl)


COMMANDS: tuple[Command[Repl], ...] = (
    list_,
    new,
    switch,
    title,
    search,
    save,
    open_,
    export,
    import_,
)
