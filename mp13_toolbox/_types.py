# SPDX-License-Identifier: MIT
"""Tool specs, calls and results: the value types every mp13 package shares.

``ToolCall`` is what a parser reads out of model output and what the toolbox
executes; ``ToolResult`` is what execution produces and what goes back to the
model; ``ToolSpec`` describes a tool in OpenAI function-calling form. All three
are frozen values. ``ToolCall.arguments`` is always a JSON object (a ``dict``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from mp13_toolbox._errors import ToolboxError, ToolRegistrationError, ToolSettingError

_E = TypeVar("_E", bound=enum.Enum)


class ToolMode(str, enum.Enum):
    """How a tool is exposed to the model.

    ``ADVERTISED``: its spec is sent to the model and calls are executed.
    ``SILENT``: not sent to the model, but executed if the model calls it anyway.
    ``DISABLED``: neither sent nor executed.
    """

    ADVERTISED = "advertised"
    SILENT = "silent"
    DISABLED = "disabled"


def enum_setting(cls: type[_E], value: object, what: str, hint: str = "") -> _E:
    """``value`` as a member of ``cls`` (a setting: mode, risk, policy), or a
    ``ToolSettingError`` that lists the allowed values."""
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise ToolSettingError(f"unknown {what} {value!r}; use one of: {allowed}{hint}") from None


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if value is not None else {}


def _call_arguments(value: Any) -> dict[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise ToolboxError(
            f"ToolCall.arguments is a JSON object (a dict of argument name to value), "
            f"not {type(value).__name__}"
        )
    return _as_dict(value)


def _spec_text(_inst: object, attr: attrs.Attribute[str], value: str) -> None:
    # A spec is sent to the model as JSON: a name of 5 would reach it as a number.
    if not isinstance(value, str) or (attr.name == "name" and not value):
        what = "a non-empty string" if attr.name == "name" else "a string"
        raise ToolRegistrationError(f"ToolSpec.{attr.name} is {what}, not {value!r}")


def _spec_parameters(value: Any) -> dict[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise ToolRegistrationError(
            f"ToolSpec.parameters is a JSON-schema object (a dict), not {type(value).__name__}"
        )
    return _as_dict(value)


def _call_name(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str):
        raise ToolboxError(
            f"ToolCall.name is the tool's name as a string, not {type(value).__name__}"
        )


@attrs.frozen
class ToolSpec:
    """One tool as the model sees it: name, description, JSON-schema parameters."""

    name: str = attrs.field(validator=_spec_text)
    description: str = attrs.field(default="", validator=_spec_text)
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}, converter=_spec_parameters, hash=False
    )

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI-style ``{"type": "function", "function": {...}}`` dict."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    @classmethod
    def from_openai(cls, spec: dict[str, Any]) -> ToolSpec:
        """Accept ``{"type": "function", "function": {...}}`` or the bare function dict."""
        fn = spec.get("function", spec) if isinstance(spec, Mapping) else None
        if not isinstance(fn, Mapping) or "name" not in fn:
            raise ToolRegistrationError(
                f"cannot read the tool spec {spec!r}; pass {{'name': ..., 'description': ..., "
                "'parameters': {...}} or the OpenAI {'type': 'function', 'function': {...}}"
            )
        return cls(
            name=fn["name"],
            description=fn.get("description", "") or "",
            parameters=fn.get("parameters") or {"type": "object", "properties": {}},
        )


@attrs.frozen
class ToolCall:
    """A call of a tool by the model. ``arguments`` is always a JSON object."""

    name: str = attrs.field(validator=_call_name)
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=_call_arguments, hash=False)
    id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI-style assistant ``tool_calls`` entry (arguments as an object)."""
        out: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if self.id is not None:
            out["id"] = self.id
        return out


@attrs.frozen
class ToolResult:
    """The outcome of executing one ``ToolCall``.

    ``content`` is the text sent back to the model. ``is_error`` marks failures
    (bad arguments, exceptions, timeouts, denials); ``truncated`` marks output
    cut at the toolbox's size cap.

    ``traceback`` is for people, never for the model (``to_message`` leaves it
    out): where a failure happened, as Python's traceback text, when the tool
    raised (or the approver, or the toolbox itself), or, for a timeout, where the
    tool was when it was given up on (when that could be read). ``None`` for a
    result that is not such a failure. A very long one (a deep recursion) keeps
    its head and its tail, about 20,000 characters in all.
    """

    name: str
    content: str
    call_id: str | None = None
    is_error: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    traceback: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The OpenAI-style ``role: tool`` message for this result."""
        msg: dict[str, Any] = {"role": "tool", "name": self.name, "content": self.content}
        if self.call_id is not None:
            msg["tool_call_id"] = self.call_id
        return msg
