# SPDX-License-Identifier: MIT
"""The context layer's one cattrs converter.

It owns every (un)structuring rule of the stored types: nodes, turns, commands,
effective states, tool scopes, calls and results, metrics and the JSON export.
Stored dicts omit fields at their default so that rows stay small. ``dumps`` /
``loads`` are the JSON helpers the store and export use; structuring failures
are turned into ``SerializationError`` with ``cattrs.transform_error`` text.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import BaseValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.v import format_exception

from mp13_context._errors import SerializationError
from mp13_context._model import Command, CommandKind, Node, Turn
from mp13_context._settings import EffectiveSettings, SystemPrompt
from mp13_engine import RequestMetrics
from mp13_toolbox import ToolCall, ToolResult, ToolsScope

T = TypeVar("T")


def _unstructure_scope(scope: ToolsScope) -> dict[str, Any]:
    out: dict[str, Any] = {"modes": {k: v.value for k, v in scope.modes.items()}}
    if scope.label:
        out["label"] = scope.label
    return out


def _structure_scope(data: Any, _: type) -> ToolsScope:
    return ToolsScope(dict(data.get("modes", {})), label=data.get("label", ""))


def _unstructure_command(cmd: Command) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": cmd.kind.value, "at": cmd.created_at}
    if cmd.text is not None:
        out["text"] = cmd.text
    if cmd.names or cmd.kind in (CommandKind.ADAPTERS_SET, CommandKind.ADAPTERS_ADD):
        out["names"] = list(cmd.names)
    if cmd.scope is not None:
        out["scope"] = _unstructure_scope(cmd.scope)
    if cmd.params:
        out["params"] = dict(cmd.params)
    if cmd.data:
        out["data"] = dict(cmd.data)
    return out


def _structure_command(data: Any, _: type) -> Command:
    return Command(
        kind=CommandKind(data["kind"]),
        text=data.get("text"),
        names=tuple(data.get("names", ())),
        scope=_structure_scope(data["scope"], ToolsScope) if data.get("scope") else None,
        params=data.get("params") or {},
        data=data.get("data") or {},
        created_at=float(data.get("at", 0.0)),
    )


def _unstructure_state(state: EffectiveSettings) -> dict[str, Any]:
    return {
        "system": [state.system.mode.value, state.system.text],
        "adapters": None if state.adapters is None else list(state.adapters),
        "tools": [_unstructure_scope(s) for s in state.tool_scopes],
        "params": state.params,
        "prev": [state.system_prev, state.adapters_prev, state.tools_prev],
    }


def _structure_state(data: Any, _: type) -> EffectiveSettings:
    mode, text = data["system"]
    prev = data.get("prev") or [None, None, None]
    adapters = data.get("adapters")
    return EffectiveSettings(
        system=SystemPrompt(mode, text),
        adapters=None if adapters is None else tuple(adapters),
        tool_scopes=tuple(_structure_scope(s, ToolsScope) for s in data.get("tools", ())),
        params=dict(data.get("params") or {}),
        system_prev=prev[0],
        adapters_prev=prev[1],
        tools_prev=prev[2],
    )


def _make_converter() -> cattrs.Converter:
    c = cattrs.Converter()
    c.register_unstructure_hook(ToolsScope, _unstructure_scope)
    c.register_structure_hook(ToolsScope, _structure_scope)
    c.register_unstructure_hook(Command, _unstructure_command)
    c.register_structure_hook(Command, _structure_command)
    c.register_unstructure_hook(EffectiveSettings, _unstructure_state)
    c.register_structure_hook(EffectiveSettings, _structure_state)
    for cls in (ToolCall, ToolResult, RequestMetrics):
        c.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, c, _cattrs_omit_if_default=True)
        )
    c.register_unstructure_hook(
        Turn,
        make_dict_unstructure_fn(
            Turn, c, _cattrs_omit_if_default=True, node_id=override(omit=True)
        ),
    )
    c.register_structure_hook(Turn, make_dict_structure_fn(Turn, c, node_id=override(omit=True)))
    c.register_unstructure_hook(
        Node, make_dict_unstructure_fn(Node, c, _cattrs_omit_if_default=True)
    )
    return c


#: The package's converter. Treat as read-only: hooks are registered once, here.
converter = _make_converter()


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)


def _describe(exc: BaseException, tp: Any) -> str:
    """cattrs' words for ``exc``; for a value refused by a class's own check (a
    ``ValueError``: a scope's empty pattern), that check's reason too."""
    text = format_exception(exc, tp)
    return f"{text} ({exc})" if isinstance(exc, ValueError) and str(exc) else text


def structure(data: Any, cls: type[T]) -> T:
    """Structure ``data`` as ``cls``; shape errors become ``SerializationError``."""
    try:
        return converter.structure(data, cls)
    except Exception as exc:  # cattrs raises exception groups; show their readable text
        detail = (
            "; ".join(cattrs.transform_error(exc, format_exception=_describe))
            if isinstance(exc, BaseValidationError)
            else exc
        )
        raise SerializationError(
            f"data is not a valid {cls.__name__}: {detail}; "
            "was it written by mp13's export (Session.export_json)?"
        ) from exc


def dumps(value: Any) -> str:
    """Compact JSON of an attrs value (via the converter) or plain data."""
    data = converter.unstructure(value) if attrs.has(type(value)) else value
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def loads(text: str, cls: type[T]) -> T:
    return structure(json.loads(text), cls)
