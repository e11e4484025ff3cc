# SPDX-License-Identifier: MIT
"""Commands about the REPL itself: help, quit, the last error, library warnings, the
config file."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from rich.syntax import Syntax

from mp13chat import _render as render
from mp13chat._config import FIELD_HELP, config_to_json
from mp13chat._registry import Command, CommandLine, command

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


def _complete_commands(app: ChatApp, index: int, words: list[str]) -> list[str]:
    if index == 0:
        return [c.name for c in app.commands]
    try:
        cmd = app.commands.resolve(words[0])
    except Exception:
        return []
    return [s.name for s in cmd.subcommands] if index == 1 else []


@command("help", group="app", usage="/help [command [subcommand]]", complete=_complete_commands)
def help_(app: ChatApp, line: CommandLine) -> None:
    """Show the commands, or the full help of one command.

    Commands match by unique prefix (/he = /help). Plain text is sent to the model;
    start a message with // to send text that begins with a slash. Enter sends,
    Alt+Enter adds a line, Ctrl+C cancels a reply, Ctrl+D or /quit exits.
    """
    words = line.words
    if not words:
        app.console.print(render.help_overview(app.commands))
        render.print_info(app.console, "/help COMMAND for details; Tab completes.")
        return
    invocation = app.commands.parse("/" + " ".join(words), defaults=False)
    app.console.print(render.command_help(invocation.command, invocation.display_name))


@command("quit", group="app", aliases=("exit",))
def quit_(app: ChatApp, line: CommandLine) -> None:
    """Leave mp13chat (Ctrl+D does the same). The session is already saved."""
    from mp13chat._app import QuitRequested

    raise QuitRequested


@command("error", group="app")
def error(app: ChatApp, line: CommandLine) -> None:
    """Show the full traceback of the last error."""
    if app.last_traceback is None:
        render.print_info(app.console, "no error so far")
        return
    app.console.print(Syntax(app.last_traceback, "pytb", word_wrap=True))


@command("warnings", group="app")
def warnings_(app: ChatApp, line: CommandLine) -> None:
    """Show the library warnings of this run (transformers, PEFT, bitsandbytes).

    They are kept off the chat: mentioned once, written to mp13chat.log next to the
    config file."""
    log = app.library_log
    if log is None or not log.records:
        render.print_info(app.console, "no library warnings in this run")
        return
    rows = [
        (
            dt.datetime.fromtimestamp(r.created).strftime("%H:%M:%S"),
            r.name,
            r.getMessage().strip(),
        )
        for r in log.records
    ]
    title = f"library warnings ({log.total} in this run)"
    app.console.print(render.table(title, ("time", "from", "message"), rows))
    if log.path is not None:
        render.print_info(app.console, f"also in {log.path}")


@command("config", group="app")
def config(app: ChatApp, line: CommandLine) -> None:
    """Show the config in use, the file it came from and what each field means."""
    data = config_to_json(app.config)
    rows = [
        (key, repr(value), FIELD_HELP.get(key, "")) for key, value in data.items() if key[0] != "_"
    ]
    app.console.print(
        render.table(
            f"config ({app.config_path or 'defaults'})", ("field", "value", "meaning"), rows
        )
    )


COMMANDS: tuple[Command, ...] = (help_, quit_, error, warnings_, config)
