# SPDX-License-Identifier: MIT
"""The built-in slash commands: the union of every ``_cmd_*`` module's ``COMMANDS``.

Each module groups the commands of one concern and exports an immutable tuple; a new
``ChatApp`` builds its own ``CommandRegistry`` from ``builtin_commands()``.
"""

from __future__ import annotations

from mp13chat import (
    _cmd_app,
    _cmd_chat,
    _cmd_engine,
    _cmd_replay,
    _cmd_session,
    _cmd_settings,
    _cmd_tools,
)
from mp13chat._registry import Command
from mp13chat._repl import Repl

MODULES = (_cmd_chat, _cmd_session, _cmd_replay, _cmd_settings, _cmd_tools, _cmd_engine, _cmd_app)


def builtin_commands() -> list[Command[Repl]]:
    """A new list of every built-in command (the registry checks names are unique)."""
    return [cmd for module in MODULES for cmd in module.COMMANDS]
