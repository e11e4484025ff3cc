# SPDX-License-Identifier: MIT
"""``ToolContext``: what a tool may learn about the call that runs it.

A registered function that declares a parameter annotated ``ToolContext`` gets
it injected by the toolbox; that parameter is left out of the JSON schema, so
the model never sees or fills it. This is the seam for tools about tools
(the builtin ``tool_help`` lists the other tools of the caller's view) and for
tools that need the call id. The toolbox is passed as-is; a tool must not
register or unregister tools from inside a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from mp13_toolbox._scopes import ToolsView
from mp13_toolbox._types import ToolCall

if TYPE_CHECKING:
    from mp13_toolbox._toolbox import Toolbox


@attrs.frozen
class ToolContext:
    """The toolbox, view and call of the running tool call."""

    toolbox: Toolbox
    view: ToolsView
    call: ToolCall
