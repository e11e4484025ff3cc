# SPDX-License-Identifier: MIT
"""Commands about the REPL itself: help, quit, the last error, library warnings, the
config in use."""

from __future__ import annotations

import datetime as dt

from rich.syntax import Syntax

from mp13chat import _render as render
from mp13chat._config import FIELD_HELP, config_to_json
from mp13chat._errors import UnknownCommandError
from mp13chat._registry import Command, CommandLine, command
from mp13chat._repl import QuitRequested, Repl


def _complete_commands(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index == 0:
        return [c.name for c in repl.commands]
    try:  # down a nested group: /help tools scope <Tab>
        cmd = repl.commands.find(words[:index])
    except UnknownCommandError:
        return []
    return [s.name for s in cmd.subcommands]


@command("help", group="app", usage="/help [command [subcommand ...]]", complete=_complete_commands)
def help_(repl: Repl, line: CommandLine) -> None:
    """Show the commands, or the full help of one command.

    Commands match by unique prefix (/he = /help). Plain text is sent to the model;
    start a message with // to send text that begins with a slash. Enter sends,
    Alt+Enter adds a line, Ctrl+C cancels a reply, Ctrl+D or /quit exits.
    """
    words = line.words
    if not words:
        repl.console.print(render.help_overview(repl.commands))
        render.print_info(repl.console, "/help COMMAND for details; Tab completes.")
        return
    # Every word names a (sub)command: /help quit now is refused, not /help quit.
    repl.console.print(render.command_help(repl.commands.find(words)))


@command("quit", group="app", aliases=("exit",))
def quit_(repl: Repl, line: CommandLine) -> None:
    """Leave mp13chat (Ctrl+D does the same). The session is already saved."""
    raise QuitRequested


@command("error", group="app")
def error(repl: Repl, line: CommandLine) -> None:
    """Show the full traceback of the last error.

    The newest error of any kind: a command's, or a tool's that failed during a reply
    (which tool, its arguments and where it raised or, timed out, where it was stuck;
    the model only read the one-line error in the tool's panel)."""
    if repl.last_traceback is None:
        render.print_info(repl.console, "no error so far")
        return
    repl.console.print(Syntax(repl.last_traceback, "pytb", word_wrap=True))


@command("warnings", group="app")
def warnings_(repl: Repl, line: CommandLine) -> None:
    """Show the library warnings of this run (transformers, PEFT, bitsandbytes).

    They are kept off the chat: mentioned once, written to mp13chat.log next to the
    config file."""
    log = repl.library_log
    if log is None or not log.records:
        render.print_info(repl.console, "no library warnings in this run")
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
    repl.console.print(render.table(title, ("time", "from", "message"), rows))
    render.print_info(repl.console, f"also in {log.path}")


@command("config", group="app")
def config(repl: Repl, line: CommandLine) -> None:
    """Show the config in use, where it came from and what each field means."""
    data = config_to_json(repl.config)
    rows = [
        (key, repr(value), FIELD_HELP.get(key, "")) for key, value in data.items() if key[0] != "_"
    ]
    title = f"config ({repl.config_source})"
    repl.console.print(render.table(title, ("field", "value", "meaning"), rows))


COMMANDS: tuple[Command[Repl], ...] = (help_, quit_, error, warnings_, config)
