# SPDX-License-Identifier: MIT
"""The root of mp13's one exception tree.

Every error that mp13 raises on purpose is an ``Mp13Error``. The base lives here,
in the lowest layer, so that every package can subclass it without importing
upward. Each package adds its branch in its own ``_errors`` module::

    Mp13Error
    ├── ToolboxError              (mp13_toolbox)
    │   ├── ToolRegistrationError     a function or spec cannot become a tool
    │   ├── UnknownToolError          a name that is not registered
    │   └── ToolStateError            toolbox state cannot be (de)serialized
    ├── EngineError               (mp13_engine._errors)
    ├── ContextError              (mp13_context._errors)
    └── ChatError                 (mp13chat)

Tool *execution* never raises to the caller: a failing tool becomes an error
``ToolResult``. Messages say what went wrong and what to do about it.
"""

from __future__ import annotations


class Mp13Error(Exception):
    """Base of every error mp13 raises on purpose."""


class ToolboxError(Mp13Error):
    """Something about tools, their registration or their state is wrong."""


class ToolRegistrationError(ToolboxError, ValueError):
    """A function or JSON spec cannot be turned into a tool."""


class UnknownToolError(ToolboxError, KeyError):
    """A tool name that is not registered in this toolbox."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown tool"


class ToolStateError(ToolboxError, ValueError):
    """Toolbox state could not be serialized or restored."""
