# SPDX-License-Identifier: MIT
"""``ToolContext``: what a tool may learn about the call that runs it.

A registered function that declares a parameter annotated ``ToolContext`` gets
it injected by the toolbox; that parameter is left out of the JSON schema, so
the model never sees or fills it. This is the seam for tools about tools
(the builtin ``tool_help`` lists the other tools of the caller's view) and for
tools that need the call id.

``ToolContext.toolbox`` is the ``Toolbox`` running the call, typed as the
``ToolCatalog`` a tool may rely on: reading the registered tools by name. A
tool must not register or unregister tools from inside a call. The protocol
lives here, below the toolbox, so that the modules a toolbox is built from
(schemas, builtins, the call pipeline) never import the toolbox itself.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from mp13_toolbox._registry import ToolInfo
from mp13_toolbox._scopes import ToolsView
from mp13_toolbox._types import ToolCall


class ToolCatalog(Protocol):
    """The registered tools of a toolbox, read by name (``Toolbox`` is one)."""

    def names(self) -> list[str]:
        """Every registered tool's name, in registration order."""
        ...

    def get(self, name: str) -> ToolInfo:
        """One tool's info; raises ``UnknownToolError`` for an unknown name."""
        ...


@attrs.frozen
class ToolContext:
    """The toolbox, view and call of the running tool call."""

    toolbox: ToolCatalog
    view: ToolsView
    call: ToolCall
