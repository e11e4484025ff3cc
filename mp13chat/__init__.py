# SPDX-License-Identifier: MIT
"""mp13chat: the terminal REPL for mp13 (prompt-toolkit input, rich output).

Run it as ``mp13chat [--model PATH] [--session FILE] [--replay CONV] [--config FILE]``.
Inside, plain text goes to the model and ``/help`` lists the slash commands. The REPL is
thin: every command parses its arguments, calls one public function of
``mp13_context`` / ``mp13_engine`` / ``mp13_toolbox`` and renders the result.

Wrapper apps add their own tools, without any global registry:

- ``register_tool(func, **options)`` *marks* ``func`` (the mark lives on the function
  object) and returns it; ``main()`` registers every marked function bound to a name in
  the module that calls ``main()`` (and in ``__main__``), plus those passed as
  ``main(tools=[...])``. See ``examples/wrapper_app.py``.
- Or build the app yourself: ``app = ChatApp(); app.register_tool(f);
  app.register_command(cmd); app.main()`` — an ordinary object, several may coexist.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from mp13chat._app import ChatApp
from mp13chat._config import ChatConfig, default_config_path, load_config
from mp13chat._errors import ChatConfigError, ChatError, UnknownCommandError, UsageError
from mp13chat._registry import Command, CommandLine, CommandRegistry, command, group_command
from mp13chat._tools import ToolRegistration, collect_tools, register_tool


def main(argv: Sequence[str] | None = None, *, tools: Iterable[Any] = ()) -> int:
    """Run the REPL (the ``mp13chat`` console script); returns the exit status.

    ``argv`` defaults to ``sys.argv[1:]``. The app gets ``tools`` plus every function
    marked with ``register_tool`` in the calling module's namespace and in ``__main__``.
    """
    caller = sys._getframe(1).f_globals
    main_module = sys.modules.get("__main__")
    namespaces = [caller] + ([vars(main_module)] if main_module is not None else [])
    app = ChatApp(tools=collect_tools(tools, namespaces))
    return app.main(argv)


__all__ = [
    "ChatApp",
    "ChatConfig",
    "ChatConfigError",
    "ChatError",
    "Command",
    "CommandLine",
    "CommandRegistry",
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
