# SPDX-License-Identifier: MIT
"""Scopes and views: which tools the model sees and may call.

A ``ToolsScope`` is one *layer*: a map from a target to a ``ToolMode``. A target
is a tool name, ``"*"`` (every tool) or an ``fnmatch`` pattern such as
``"web_*"``. A stack of layers is resolved into a ``ToolsView``, the frozen
mode of every tool, like this:

1. Start from each tool's own registered mode (its *global* mode).
2. Apply the layers in order; a later layer wins over an earlier one.
3. A layer only touches the tools that one of its entries targets. When several
   entries of the same layer target one tool (``"*"``, a pattern and its exact
   name), the strongest mode wins: ``disabled`` beats ``advertised`` beats
   ``silent``. An exact name does *not* beat ``"*"`` inside one layer; that is
   what later layers are for. To allow only some tools, stack two layers::

       [ToolsScope({"*": "disabled"}), ToolsScope({"calculator": "advertised"})]

These rules make a layer an idempotent function of a view, make the empty layer
the identity, make stacking associative, and make ``disabled`` in the last
layer final (tests/toolbox/test_scopes.py checks all four with hypothesis).

``ADVERTISED`` tools go into the request's ``tools``; ``SILENT`` tools are
executed if called but never advertised; ``DISABLED`` and unknown tools are
never executed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mp13_toolbox._types import ToolMode

# Strength of a mode when several entries of ONE layer target the same tool.
_STRENGTH = {ToolMode.SILENT: 0, ToolMode.ADVERTISED: 1, ToolMode.DISABLED: 2}
_PATTERN_CHARS = frozenset("*?[")


def _as_mode(value: ToolMode | str) -> ToolMode:
    try:
        return ToolMode(value)
    except ValueError:
        known = ", ".join(m.value for m in ToolMode)
        raise ValueError(f"unknown tool mode {value!r}; use one of: {known}") from None


def _as_modes(value: Mapping[str, ToolMode | str] | None) -> dict[str, ToolMode]:
    if value is None:
        return {}
    out: dict[str, ToolMode] = {}
    for target, mode in dict(value).items():
        if not isinstance(target, str) or not target:
            raise ValueError(f"a scope target must be a non-empty tool name or pattern: {target!r}")
        out[target] = _as_mode(mode)
    return out


def _is_pattern(target: str) -> bool:
    return not _PATTERN_CHARS.isdisjoint(target)


@attrs.frozen
class ToolsScope:
    """One layer of tool modes: ``{"*" | name | pattern: mode}``.

    Accepts ``ToolMode`` values or their strings. ``label`` is a free name for
    front ends (shown in listings); it does not affect resolution.
    """

    modes: dict[str, ToolMode] = attrs.field(factory=dict, converter=_as_modes, hash=False)
    label: str = ""

    def __hash__(self) -> int:  # dicts are unhashable; hash the sorted items instead
        return hash((tuple(sorted(self.modes.items())), self.label))

    def mode_for(self, name: str) -> ToolMode | None:
        """The mode this layer gives ``name``, or ``None`` when no entry targets it."""
        best: ToolMode | None = None
        for target, mode in self.modes.items():
            hit = target == name or (_is_pattern(target) and fnmatch.fnmatchcase(name, target))
            if hit and (best is None or _STRENGTH[mode] > _STRENGTH[best]):
                best = mode
        return best

    @classmethod
    def all(cls, mode: ToolMode | str, label: str = "") -> ToolsScope:
        """A layer that sets every tool to ``mode``."""
        return cls({"*": mode}, label=label)


@attrs.frozen
class ToolsView:
    """The resolved mode of every known tool: a frozen value, safe to share.

    Names missing from ``modes`` are unknown: not advertised, not callable.
    """

    modes: dict[str, ToolMode] = attrs.field(factory=dict, converter=_as_modes, hash=False)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.modes.items())))

    def mode(self, name: str) -> ToolMode | None:
        """The tool's mode, or ``None`` for a name this view does not know."""
        return self.modes.get(name)

    def advertised(self) -> list[str]:
        """Names whose specs are sent to the model, sorted."""
        return sorted(n for n, m in self.modes.items() if m is ToolMode.ADVERTISED)

    def silent(self) -> list[str]:
        """Names that are executed when called but not advertised, sorted."""
        return sorted(n for n, m in self.modes.items() if m is ToolMode.SILENT)

    def disabled(self) -> list[str]:
        """Names that are known but never executed, sorted."""
        return sorted(n for n, m in self.modes.items() if m is ToolMode.DISABLED)

    def callable(self, name: str) -> bool:
        """Whether a call of ``name`` may run (advertised or silent)."""
        return self.modes.get(name) in (ToolMode.ADVERTISED, ToolMode.SILENT)

    def apply(self, scope: ToolsScope) -> ToolsView:
        """This view with one more layer on top."""
        if not scope.modes:
            return self
        out = dict(self.modes)
        for name in out:
            mode = scope.mode_for(name)
            if mode is not None:
                out[name] = mode
        return ToolsView(out)

    def stack(self, scopes: Iterable[ToolsScope]) -> ToolsView:
        """This view with ``scopes`` applied in order (later layers win)."""
        view = self
        for scope in scopes:
            view = view.apply(scope)
        return view

    @classmethod
    def resolve(
        cls, base: Mapping[str, ToolMode | str], scopes: Iterable[ToolsScope] = ()
    ) -> ToolsView:
        """Resolve ``scopes`` over the global modes ``base`` (tool name -> mode)."""
        return cls(base).stack(scopes)

    def to_dict(self) -> dict[str, Any]:
        """``{name: mode string}``, e.g. for display or logs."""
        return {n: m.value for n, m in sorted(self.modes.items())}
