# SPDX-License-Identifier: MIT
"""mp13's one exception tree, and the toolbox's branch of it.

Every error that mp13 raises on purpose is an ``Mp13Error``, so
``except Mp13Error`` catches all of them and nothing else. The base lives here,
in the lowest layer, so that every package subclasses it without importing
upward; it is public as ``mp13_toolbox.Mp13Error`` (and re-exported as
``mp13_engine.Mp13Error``), which is where the other packages import it from.
Each package adds one branch in its own ``_errors`` module, whose docstring
lists it in full::

    Mp13Error                     (mp13_toolbox; this module)
    ├── UnknownKeywordError       (also TypeError) a misspelt keyword argument to a config,
    │                             request or settings class; each package's class for it
    │                             also derives from its own error (ConfigKeywordError, ...)
    ├── ToolboxError              (mp13_toolbox; this module)
    │   ├── ToolRegistrationError     a function or spec cannot become a tool
    │   ├── UnknownToolError          a name that is not registered
    │   ├── ToolSettingError          a mode, risk, approval, answer, budget or scope
    │   │   │                         value that is not one of the allowed ones
    │   │   └── ToolSettingKeywordError   a misspelt ToolsScope / ToolBudget keyword
    │   │                                 (also an UnknownKeywordError)
    │   ├── ToolSnapshotError         a toolbox snapshot cannot be (de)serialized
    │   └── CalculatorError           the builtin calculator refuses an expression
    ├── EngineError               (mp13_engine._errors)
    ├── ContextError              (mp13_context._errors)
    └── ChatError                 (mp13chat._errors)

Most errors also derive from the builtin they refine (``ValueError``,
``KeyError``, ...), so code that caught those keeps working. Third-party errors
are mapped at a package's boundary with ``raise ... from exc``. Tool
*execution* never raises to the caller: whatever a tool raises becomes an error
``ToolResult``. Messages say what went wrong and what to do about it.

Warnings are not errors (nothing is raised; the call goes on) and sit outside the
tree, under Python's own categories, so ``warnings.filterwarnings`` picks them::

    UserWarning
    └── ToolDescriptionWarning    a function tool registered with no description
"""

from __future__ import annotations


class Mp13Error(Exception):
    """Base of every error mp13 raises on purpose."""


class UnknownKeywordError(Mp13Error, TypeError):
    """A keyword argument that the class being built has no field for (a misspelt name).

    Raised by the constructors that ``strict_keywords`` guards; the message names the
    keyword, the closest field and every valid one. Each package raises a subclass that
    is also its own error (``mp13_engine.ConfigKeywordError`` is a ``ConfigError``), and
    it stays a ``TypeError``: what Python raised for such a call before.
    """


class ToolboxError(Mp13Error):
    """Something about tools, their registration or their snapshot is wrong."""


class ToolRegistrationError(ToolboxError, ValueError):
    """A function or JSON spec cannot be turned into a tool."""


class UnknownToolError(ToolboxError, KeyError):
    """A tool name that is not registered in this toolbox."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown tool"


class ToolSettingError(ToolboxError, ValueError):
    """A tool mode, risk, approval policy or answer, budget limit or scope target not allowed."""


class ToolSnapshotError(ToolboxError, ValueError):
    """A toolbox snapshot could not be serialized or restored."""


class ToolSettingKeywordError(ToolSettingError, UnknownKeywordError):
    """A misspelt keyword argument to ``ToolsScope`` or ``ToolBudget``."""


class ToolDescriptionWarning(UserWarning):
    """A function was registered as a tool with no description (no docstring summary, no
    ``description=``): the model is shown only its name and parameters.

    Warned once per registration, naming the tool. Give the function a docstring, or pass
    ``description=...`` (``description=""`` keeps it empty on purpose, without this
    warning); ``warnings.filterwarnings("ignore", category=ToolDescriptionWarning)``
    silences it everywhere.
    """
