# SPDX-License-Identifier: MIT
"""The built-in slash commands: the union of every ``_cmd_*`` module's ``COMMANDS``.

Each module groups the commands of one concern and exports an immutable tuple; a new
``ChatApp`` builds its own ``CommandRegistry`` from ``builtin_commands()``.
"""

from __future__ import annotations

import attrs

from mp13chat import (
    _cmd_app,
    _cmd_chat,
    _cmd_engine,
    _cmd_logprobs,
    _cmd_replay,
    _cmd_session,
    _cmd_settings,
    _cmd_tools,
)
from mp13chat._registry import Command
from mp13chat._repl import Repl

MODULES = (
    _cmd_chat,
    _cmd_session,
    _cmd_replay,
    _cmd_settings,
    _cmd_tools,
    _cmd_engine,
    _cmd_logprobs,
    _cmd_app,
)


def builtin_commands() -> list[Command[Repl]]:
    """A new list of every built-in command (the registry checks names are unique).

    The built-ins that show no arguments refuse words on purpose, so their refusal
    carries no advice for an app's author (``Command.usage_defaulted`` off)."""
    return [_as_written(cmd) for module in MODULES for cmd in module.COMMANDS]


def _as_written(cmd: Command[Repl]) -> Command[Repl]:
    subs = tuple(_as_written(c) for c in cmd.subcommands)
    return attrs.evolve(cmd, usage_defaulted=False, subcommands=subs)
