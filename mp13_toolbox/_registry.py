# SPDX-License-Identifier: MIT
"""The registry: tool name -> registered tool (spec, mode, risk, policy, handler).

A ``ToolRecord`` is one tool's spec and settings without its callable (what a
saved toolbox holds per tool); a ``RegisteredTool`` is a record plus the
callable and the ``Signature`` it is called through. Both are frozen values:
changing a tool's mode or risk swaps in a new value under the registry's lock,
so a call that already took its snapshot runs with consistent settings while
another thread reconfigures the toolbox. Names keep registration order
(listings and ``specs`` use it).

A tool with ``handler is None`` is *unresolved*: its state was loaded but no
callable could be relinked by name. Unresolved tools are listed, never
advertised and never executed.
"""

from __future__ import annotations

import enum
import inspect
import threading
from collections.abc import Callable
from typing import Any

import attrs

from mp13_toolbox._approval import Approval, Risk
from mp13_toolbox._errors import ToolRegistrationError, UnknownToolError
from mp13_toolbox._types import ToolMode, ToolSpec


class ToolKind(str, enum.Enum):
    """Where a tool's behaviour comes from."""

    FUNCTION = "function"  # a Python callable, arguments passed by name
    EXTERNAL = "external"  # a handler(call) with a caller-supplied JSON spec


@attrs.frozen
class ToolInfo:
    """Public description of one registered tool (what ``Toolbox.list`` returns)."""

    name: str
    description: str
    mode: ToolMode
    risk: Risk
    approval: Approval | None  # the tool's own policy; None = the risk default
    timeout_s: float | None  # None = the toolbox default
    kind: ToolKind
    resolved: bool
    spec: ToolSpec


@attrs.frozen
class Signature:
    """How a function tool is called: its parameters' annotations and its context slot.

    ``function_spec`` reads it from the function; the pipeline builds the keyword
    arguments from it.
    """

    params: dict[str, Any] = attrs.field(hash=False)  # name -> annotation, in order
    context_param: str | None = None


@attrs.frozen
class ToolRecord:
    """One tool's spec and settings, without its callable (what saved state holds)."""

    spec: ToolSpec
    mode: ToolMode = ToolMode.ADVERTISED
    risk: Risk = Risk.LOW
    approval: Approval | None = None
    timeout_s: float | None = None
    kind: ToolKind = ToolKind.FUNCTION


@attrs.frozen
class RegisteredTool(ToolRecord):
    """A record with its callable; ``handler is None``: unresolved (see the module doc)."""

    handler: Callable[..., Any] | None = attrs.field(default=None, eq=False)
    signature: Signature | None = attrs.field(default=None, eq=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def resolved(self) -> bool:
        return self.handler is not None

    @property
    def is_async(self) -> bool:
        h = self.handler
        # A class instance with ``async def __call__`` is async too.
        return inspect.iscoroutinefunction(h) or inspect.iscoroutinefunction(
            type(h).__call__ if h is not None and not inspect.isroutine(h) else None
        )

    def record(self) -> ToolRecord:
        """The saved form: this tool's ``ToolRecord`` fields, without the callable."""
        return ToolRecord(**{f.name: getattr(self, f.name) for f in attrs.fields(ToolRecord)})

    def info(self) -> ToolInfo:
        """The public description: the record's fields, its name, description and status."""
        return ToolInfo(
            name=self.name,
            description=self.spec.description,
            resolved=self.resolved,
            **attrs.asdict(self.record(), recurse=False),
        )


class ToolRegistry:
    """Thread-safe ordered map of registered tools."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # the toolbox holds it too, around several steps
        self._tools: dict[str, RegisteredTool] = {}

    def add(self, tool: RegisteredTool, replace: bool = False) -> None:
        with self.lock:
            old = self._tools.get(tool.name)
            if old is not None and not replace and old.resolved:
                raise ToolRegistrationError(
                    f"a tool named {tool.name!r} is already registered; pass replace=True to "
                    "replace it, unregister it first, or register under another name"
                )
            self._tools[tool.name] = tool

    def remove(self, name: str) -> RegisteredTool:
        with self.lock:
            self.require(name)
            return self._tools.pop(name)

    def get(self, name: str) -> RegisteredTool | None:
        if not isinstance(name, str):
            return None  # a name is a str; the caller's error names what it got
        with self.lock:
            return self._tools.get(name)

    def require(self, name: str) -> RegisteredTool:
        tool = self.get(name)
        if tool is None:
            raise self.unknown_tool_error(name)
        return tool

    def update(self, name: str, **changes: Any) -> RegisteredTool:
        with self.lock:
            tool = attrs.evolve(self.require(name), **changes)
            self._tools[name] = tool
            return tool

    def snapshot(self) -> list[RegisteredTool]:
        with self.lock:
            return list(self._tools.values())

    def unknown_tool_error(self, name: str) -> UnknownToolError:
        known = ", ".join(self._tools) or "none registered"
        return UnknownToolError(f"no tool named {name!r} in this toolbox; known tools: {known}")

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._tools
