# SPDX-License-Identifier: MIT
"""A toolbox snapshot: specs, modes, risks, policies, remembered answers, saved as data.

``ToolboxSnapshot`` holds everything about a toolbox except the callables, so it
can be saved with a session and restored later. ``to_dict``/``from_dict`` (and
the JSON twins) go through the package converter; malformed input raises
``ToolSnapshotError`` with cattrs' readable error text. Restoring relinks
callables by tool name (see ``Toolbox.from_snapshot`` / ``Toolbox.restore``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from mp13_toolbox._approval import DEFAULT_APPROVALS, Approval, ApprovalAnswer, Risk
from mp13_toolbox._builtins import BUILTINS
from mp13_toolbox._convert import converter, error_text
from mp13_toolbox._errors import ToolSnapshotError
from mp13_toolbox._registry import RegisteredTool, ToolKind, ToolRecord
from mp13_toolbox._schema import function_spec

SNAPSHOT_VERSION = 1


@attrs.frozen
class ToolboxSnapshot:
    """A toolbox without its callables; round-trips through ``to_dict``/``from_dict``."""

    tools: tuple[ToolRecord, ...] = ()
    remembered: dict[str, ApprovalAnswer] = attrs.field(factory=dict, hash=False)
    approval_defaults: dict[Risk, Approval] = attrs.field(
        factory=lambda: dict(DEFAULT_APPROVALS), hash=False
    )
    max_output_chars: int | None = 16_000
    default_timeout_s: float | None = 30.0
    version: int = SNAPSHOT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        data: dict[str, Any] = converter.unstructure(self)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolboxSnapshot:
        """Inverse of ``to_dict``; raises ``ToolSnapshotError`` on malformed data."""
        if not isinstance(data, dict):
            raise ToolSnapshotError(
                f"a toolbox snapshot is a JSON object (what to_dict() returns), not "
                f"{type(data).__name__}; pass data saved from Toolbox.snapshot()"
            )
        version = data.get("version", SNAPSHOT_VERSION)
        if version != SNAPSHOT_VERSION:
            raise ToolSnapshotError(
                f"toolbox snapshot version {version!r} is not supported (expected "
                f"{SNAPSHOT_VERSION}); save the snapshot again with this version of mp13_toolbox"
            )
        try:
            return converter.structure(data, cls)
        except Exception as exc:
            raise ToolSnapshotError(
                f"toolbox snapshot is malformed: {error_text(exc)}; pass data made by "
                "ToolboxSnapshot.to_dict()"
            ) from exc

    def to_json(self) -> str:
        """``to_dict`` as JSON text (keys sorted, so equal snapshots give equal text)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ToolboxSnapshot:
        """Inverse of ``to_json``; raises ``ToolSnapshotError`` on bad JSON or data."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ToolSnapshotError(f"toolbox snapshot is not valid JSON: {exc}") from exc
        return cls.from_dict(data)


def relink(
    rec: ToolRecord,
    current: RegisteredTool | None,
    handlers: Mapping[str, Callable[..., Any]],
    functions: Mapping[str, Callable[..., Any]],
) -> RegisteredTool:
    """A saved tool with its callable found by name (``handler=None`` if none is found).

    Lookup order: ``handlers``/``functions`` given by the caller, then the tool
    registered now under that name (same kind), then a builtin of that name.
    The saved spec and settings always win over the current registration.
    """
    name = rec.spec.name
    handler = handlers.get(name) or functions.get(name)
    signature = None
    if handler is None and current is not None and current.kind is rec.kind:
        handler, signature = current.handler, current.signature
    elif handler is None and rec.kind is ToolKind.FUNCTION:
        handler = BUILTINS.get(name)
    if handler is not None and signature is None and rec.kind is ToolKind.FUNCTION:
        signature = function_spec(handler, name=name)[1]
    return RegisteredTool(**attrs.asdict(rec, recurse=False), handler=handler, signature=signature)


def callables_by_name(
    functions: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]],
) -> dict[str, Callable[..., Any]]:
    """Callables keyed by name: a mapping as given, a list by each function's ``__name__``.

    ``ToolSnapshotError`` for anything else (one function, a string, a non-callable),
    which would otherwise fail as a bare ``TypeError`` or ``AttributeError``."""
    usage = "pass functions=[f, ...] or a {name: function} map"
    if isinstance(functions, Mapping):
        bad = [k for k, f in functions.items() if not isinstance(k, str) or not callable(f)]
        if bad:
            raise ToolSnapshotError(f"functions[{bad[0]!r}] is not a named function; {usage}")
        return dict(functions)
    if isinstance(functions, str) or not isinstance(functions, Iterable):
        raise ToolSnapshotError(f"functions is a list of functions, not {functions!r}; {usage}")
    named: dict[str, Callable[..., Any]] = {}
    for f in functions:
        name = getattr(f, "__name__", None)
        if not callable(f) or not isinstance(name, str):
            raise ToolSnapshotError(f"functions holds {f!r}, not a named function; {usage}")
        named[name] = f
    return named


def restore_callables(
    snapshot: object,
    functions: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]],
    handlers: Mapping[str, Callable[..., Any]] | None,
) -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    """What ``Toolbox.restore`` relinks from, as ``(functions, handlers)`` keyed by name.

    ``ToolSnapshotError`` when ``snapshot`` is not a ``ToolboxSnapshot`` or ``functions``
    / ``handlers`` are not what ``restore`` takes, before anything is restored."""
    if not isinstance(snapshot, ToolboxSnapshot):
        raise ToolSnapshotError(
            f"restore takes a ToolboxSnapshot, not {type(snapshot).__name__}; "
            "read saved data with ToolboxSnapshot.from_dict(data)"
        )
    funcs = callables_by_name(functions)
    if handlers is not None and not isinstance(handlers, Mapping):
        raise ToolSnapshotError(
            f"handlers is a {{tool name: handler}} map, not {handlers!r}; "
            "pass handlers={'name': handler}"
        )
    return funcs, dict(handlers or {})
