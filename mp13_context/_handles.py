# SPDX-License-Identifier: MIT
"""Command handles of a cursor: ``cur.system``, ``cur.adapters``, ``cur.tools``, ``cur.params``.

Each method records one ``Command`` through the cursor (``Cursor.record``), so
the rules of where commands go live in one place; ``show()`` reads the effective
value at the cursor. Nothing here keeps state of its own. A handle knows its
cursor only as a ``CommandTarget``, so this module does not import the cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mp13_context._errors import ContextError
from mp13_context._model import Command, CommandKind
from mp13_context._request import tool_view
from mp13_context._scope import ScopeState
from mp13_context._settings import EffectiveSettings, SystemPrompt, adapter_names, validate_params
from mp13_toolbox import ToolsScope, ToolsView


class CommandTarget(Protocol):
    """What a handle needs of its cursor (``Cursor`` is one)."""

    scope_state: ScopeState

    @property
    def settings(self) -> EffectiveSettings: ...

    def record(self, cmd: Command) -> None: ...


class _Handle:
    def __init__(self, cursor: CommandTarget) -> None:
        self._cur = cursor


class SystemCommands(_Handle):
    """``cur.system``: the system message on this branch."""

    def set(self, text: str) -> None:
        """Replace the system message."""
        self._cur.record(Command(kind=CommandKind.SYSTEM_SET, text=text))

    def add(self, text: str) -> None:
        """Append a paragraph to the system message. Where none is set (the template's
        default applies, or ``none()``) ``text`` becomes the whole system message: a
        template's default system prompt is replaced, not extended."""
        self._cur.record(Command(kind=CommandKind.SYSTEM_ADD, text=text))

    def none(self) -> None:
        """Send no system message (an empty one, so no template default is injected)."""
        self._cur.record(Command(kind=CommandKind.SYSTEM_NONE))

    def default(self) -> None:
        """Back to the chat template's default (no system message is sent)."""
        self._cur.record(Command(kind=CommandKind.SYSTEM_DEFAULT))

    def pop(self) -> None:
        """Undo the last system command on this branch."""
        self._cur.record(Command(kind=CommandKind.SYSTEM_POP))

    def show(self) -> SystemPrompt:
        """The effective system message here (``mode`` and ``text``)."""
        return self._cur.settings.system


class AdapterCommands(_Handle):
    """``cur.adapters``: the LoRA adapters requests on this branch use."""

    def set(self, names: str | Sequence[str]) -> None:
        """Use exactly these adapters (``[]`` = the base model)."""
        self._cur.record(Command(kind=CommandKind.ADAPTERS_SET, names=adapter_names(names)))

    def add(self, names: str | Sequence[str]) -> None:
        """Add adapters to the current set. Where the engine's default applies
        (``show()`` is None) there is no set to add to: the result is just ``names``
        (the engine's defaults are not looked up; ``set`` them too to keep them)."""
        self._cur.record(Command(kind=CommandKind.ADAPTERS_ADD, names=adapter_names(names)))

    def default(self) -> None:
        """Back to the engine's default adapters."""
        self._cur.record(Command(kind=CommandKind.ADAPTERS_DEFAULT))

    def pop(self) -> None:
        """Undo the last adapters command on this branch."""
        self._cur.record(Command(kind=CommandKind.ADAPTERS_POP))

    def show(self) -> tuple[str, ...] | None:
        """The adapters here: ``None`` = engine default, ``()`` = base model."""
        return self._cur.settings.adapters


class ToolCommands(_Handle):
    """``cur.tools``: tool scope layers (``mp13_toolbox.ToolsScope``) on this branch.

    Layers are session data, so they can only narrow the toolbox: hide or disable
    tools, never enable or advertise more than the toolbox's global modes allow.
    """

    def set(self, scope: ToolsScope) -> None:
        """Replace all layers with ``scope``."""
        self._cur.record(Command(kind=CommandKind.TOOLS_SET, scope=scope))

    def add(self, scope: ToolsScope) -> None:
        """Put one more layer on top."""
        self._cur.record(Command(kind=CommandKind.TOOLS_ADD, scope=scope))

    def reset(self) -> None:
        """No layers: every tool in its global (registered) mode."""
        self._cur.record(Command(kind=CommandKind.TOOLS_RESET))

    def pop(self) -> None:
        """Undo the last tools command on this branch."""
        self._cur.record(Command(kind=CommandKind.TOOLS_POP))

    def show(self) -> tuple[ToolsScope, ...]:
        """The scope layers here, bottom first."""
        return self._cur.settings.tool_scopes

    def view(self) -> ToolsView:
        """The resolved ``ToolsView`` here (needs a toolbox on the context)."""
        toolbox = self._cur.scope_state.toolbox
        if toolbox is None:
            raise ContextError("no toolbox on this context; pass ChatContext(..., toolbox=tb)")
        return tool_view(toolbox, self._cur.settings)


class ParamCommands(_Handle):
    """``cur.params``: generation and runner parameters on this branch."""

    def set(self, **params: Any) -> None:
        """Set parameters (``name=None`` restores a default). Names: ``mp13_context.PARAMS``."""
        self._cur.record(Command(kind=CommandKind.PARAMS_SET, params=validate_params(params)))

    def show(self) -> dict[str, Any]:
        """The parameters set on this branch (without defaults or cursor overrides)."""
        return dict(self._cur.settings.params)
