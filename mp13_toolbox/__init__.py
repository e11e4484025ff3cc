# SPDX-License-Identifier: MIT
"""mp13_toolbox: tools from Python functions or JSON specs, modes, scopes, safe execution.

Quick tour::

    from mp13_toolbox import Toolbox, ToolCall, ToolsScope

    tb = Toolbox(builtins=True)

    @tb.register
    def add(a: int, b: int = 1) -> int:
        '''Add two integers.

        Args:
            a: The first number.
            b: The second number.
        '''
        return a + b

    view = tb.view([ToolsScope({"current_time": "silent"})])
    tb.specs(view)                                  # OpenAI-style specs for Request.tools
    tb.execute(ToolCall("add", {"a": 2}), view)     # ToolResult(content="3", ...)

This package imports nothing else of mp13 and never imports torch.
"""

from mp13_toolbox._approval import (
    DEFAULT_APPROVALS,
    Approval,
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    Risk,
)
from mp13_toolbox._budget import BudgetTracker, ToolBudget
from mp13_toolbox._builtins import BUILTINS, CalculatorError
from mp13_toolbox._context import ToolContext
from mp13_toolbox._errors import (
    Mp13Error,
    ToolboxError,
    ToolDescriptionWarning,
    ToolRegistrationError,
    ToolSettingError,
    ToolSettingKeywordError,
    ToolSnapshotError,
    UnknownKeywordError,
    UnknownToolError,
)
from mp13_toolbox._execute import TRUNCATION_MARKER
from mp13_toolbox._keywords import did_you_mean, strict_keywords
from mp13_toolbox._patterns import resolve_ref
from mp13_toolbox._registry import ToolInfo, ToolKind, ToolRecord
from mp13_toolbox._schema import function_spec, parse_docstring
from mp13_toolbox._scopes import ToolsScope, ToolsView
from mp13_toolbox._snapshot import ToolboxSnapshot
from mp13_toolbox._text import plural
from mp13_toolbox._toolbox import Toolbox
from mp13_toolbox._types import ToolCall, ToolMode, ToolResult, ToolSpec
from mp13_toolbox._validate import validate

__all__ = [
    "BUILTINS",
    "DEFAULT_APPROVALS",
    "TRUNCATION_MARKER",
    "Approval",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "BudgetTracker",
    "CalculatorError",
    "Mp13Error",
    "Risk",
    "ToolBudget",
    "ToolCall",
    "ToolContext",
    "ToolDescriptionWarning",
    "ToolInfo",
    "ToolKind",
    "ToolMode",
    "ToolRecord",
    "ToolRegistrationError",
    "ToolResult",
    "ToolSettingError",
    "ToolSettingKeywordError",
    "ToolSnapshotError",
    "ToolSpec",
    "Toolbox",
    "ToolboxError",
    "ToolboxSnapshot",
    "ToolsScope",
    "ToolsView",
    "UnknownKeywordError",
    "UnknownToolError",
    "did_you_mean",
    "function_spec",
    "parse_docstring",
    "plural",
    "resolve_ref",
    "strict_keywords",
    "validate",
]
