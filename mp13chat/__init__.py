# SPDX-License-Identifier: MIT
"""mp13chat: the terminal REPL for mp13 (prompt-toolkit input, rich output).

Run it as ``mp13chat [--model PATH|NAME] [--session FILE] ...`` (``mp13chat --help``
lists the flags); ``mp13chat -p QUESTION`` answers once and exits. Inside, plain text
goes to the model and ``/help`` lists the slash commands. The REPL is thin: every
command parses its arguments, calls one public function of ``mp13_context`` /
``mp13_engine`` / ``mp13_toolbox`` and renders the result.

Wrapper apps hand their own tools over explicitly; there is no global registry and
``main`` never looks at its caller's namespace:

- ``main(tools=[f, g])`` registers exactly those functions. ``register_tool(f, **options)``
  (also a decorator) attaches ``Toolbox.register`` options such as ``risk="medium"`` to
  ``f`` for when it is passed there. See ``examples/wrapper_app.py``.
- Or build the app yourself: ``app = ChatApp(); app.register_tool(f);
  app.register_command(cmd); app.main()`` — an ordinary object, several may coexist.
  ``ChatApp(ChatConfig(...))`` starts from that config instead of a config file;
  ``ChatApp(config_path=...)`` reads its own file (see ``ChatApp``).

A command is a function ``func(repl, line)`` made with ``@command(NAME)`` (its docstring
is its help). ``repl`` is the running app seen through the ``Repl`` protocol — the
console, the session, the current cursor, the engine, the toolbox and a few services —
which is all the built-in commands use too; ``line`` is a ``CommandLine``. A command that
takes words says so: ``@command("name", usage="/name ARGS")``; without ``usage=`` words
after its name are refused. Tests drive an app without a terminal: ``ChatApp(config,
engine=mp13_context.testing.FakeEngine(), console=...)``, ``await app.start()``, then
``await app.execute("/name some words")``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mp13chat._app import ChatApp
from mp13chat._config import ChatConfig, default_config_path, load_config
from mp13chat._errors import (
    ChatConfigError,
    ChatConfigKeywordError,
    ChatError,
    UnknownCommandError,
    UsageError,
)
from mp13chat._registry import Command, CommandLine, CommandRegistry, command, group_command
from mp13chat._repl import Repl
from mp13chat._tools import ToolLike, ToolRegistration, register_tool


def main(argv: Sequence[str] | None = None, *, tools: Iterable[ToolLike] = ()) -> int:
    """Run the REPL (the ``mp13chat`` console script); returns the exit status.

    ``argv`` defaults to ``sys.argv[1:]``. The app's toolbox gets the builtins plus
    exactly the functions in ``tools`` (with the options ``register_tool`` attached to
    them, if any).
    """
    return ChatApp(tools=tools).main(argv)


__all__ = [
    "ChatApp",
    "ChatConfig",
    "ChatConfigError",
    "ChatConfigKeywordError",
    "ChatError",
    "Command",
    "CommandLine",
    "CommandRegistry",
    "Repl",
    "ToolRegistration",
    "UnknownCommandError",
    "UsageError",
    "command",
    "default_config_path",
    "group_command",
    "load_config",
    "main",
    "register_tool",
]
