# SPDX-License-Identifier: MIT
"""mp13_toolbox: tools from Python functions or JSON specs, modes, scopes, safe execution."""

from mp13_toolbox._errors import (
    Mp13Error,
    ToolboxError,
    ToolRegistrationError,
    ToolStateError,
    UnknownToolError,
)
from mp13_toolbox._types import ToolCall, ToolMode, ToolResult, ToolSpec

__all__ = [
    "Mp13Error",
    "ToolCall",
    "ToolMode",
    "ToolRegistrationError",
    "ToolResult",
    "ToolSpec",
    "ToolStateError",
    "ToolboxError",
    "UnknownToolError",
]
