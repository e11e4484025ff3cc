# SPDX-License-Identifier: MIT
"""Scopes and views: which tools the model sees and may call.

A ``ToolsScope`` is one *layer*: a map from a target to a ``ToolMode``. A target
is a tool name, ``"*"`` (every tool) or an ``fnmatch`` pattern such as
``"web_*"``. A stack of layers is resolved into a ``ToolsView``, the frozen
mode of every tool, like this:

1. Start from each tool's own registered mode (its *global* mode).
2. Apply the layers in order; a later layer wins over an earlier one.
3. A layer only touches the tools that one of its entries targets. When several
   entries of the same layer target one tool, the most specific entry wins: an
   exact name beats a pattern (``"web_*"``), which beats ``"*"``. Between
   entries of equal specificity (two patterns) the strongest mode wins:
   ``disabled`` beats ``advertised`` beats ``silent``. So one layer is an
   allow-list::

       ToolsScope({"*": "disabled", "calculator": "advertised"})  # only the calculator

These rules make a layer an idempotent function of a view, make the empty layer
the identity, make stacking associative, and make ``disabled`` in the last
layer final (tests/toolbox/test_scopes.py checks them with hypothesis).

**The global modes are a ceiling.** The toolbox's own settings are the
operator's policy; layers (a conversation's tools commands, imported or saved
data, a user's ``/tools scope``) can only *narrow* it. ``ToolsView.resolve``
(which ``Toolbox.view`` uses) caps every resolved mode at the tool's global
mode, exposure ordered ``disabled`` < ``silent`` < ``advertised``: a layer can
hide (``silent``) or disable a tool, never enable a tool the operator disabled
nor advertise one the operator keeps silent. ``Toolbox.execute`` applies the
same cap to whatever view it is given, and no layer can touch approvals or risk
policy (a scope holds modes only), so session data never runs a tool with less
protection than the operator set. To widen, change the toolbox
(``Toolbox.set_mode``, ``register(mode=...)``).

``ADVERTISED`` tools go into the request's ``tools``; ``SILENT`` tools are
executed if called but never advertised; ``DISABLED`` and unknown tools are
never executed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mp13_toolbox._errors import ToolSettingError, ToolSettingKeywordError
from mp13_toolbox._keywords import strict_keywords
from mp13_toolbox._types import ToolMode, enum_setting

# Strength of a mode when equally specific entries of ONE layer target the same tool.
_STRENGTH = {ToolMode.SILENT: 0, ToolMode.ADVERTISED: 1, ToolMode.DISABLED: 2}
# How much a mode exposes a tool; a ceiling caps a view on this order.
_EXPOSURE = {ToolMode.DISABLED: 0, ToolMode.SILENT: 1, ToolMode.ADVERTISED: 2}
_PATTERN_CHARS = frozenset("*?[")  # a target without them is a name, matched exactly


def as_mode(value: ToolMode | str) -> ToolMode:
    return enum_setting(ToolMode, value, "tool mode")


def _as_modes(value: Mapping[str, ToolMode | str] | None) -> dict[str, ToolMode]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ToolSettingError(
            f"a scope's modes are a mapping {{tool name or pattern: mode}}, not "
            f"{type(value).__name__}; e.g. ToolsScope({{'*': 'silent', 'calc': 'advertised'}})"
        )
    out: dict[str, ToolMode] = {}
    for target, mode in dict(value).items():
        if not isinstance(target, str) or not target:
            raise ToolSettingError(
                f"a scope target must be a non-empty tool name or pattern: {target!r}"
            )
        out[target] = as_mode(mode)
    return out


def is_pattern(target: str) -> bool:
    """Whether a scope or ``set_mode`` target is an ``fnmatch`` pattern, not a tool name."""
    return not _PATTERN_CHARS.isdisjoint(target)


def _specificity(target: str, name: str) -> int | None:
    """How specifically ``target`` names ``name`` (2 exact, 1 pattern, 0 ``*``); None: no hit."""
    if target == name:
        return 2
    if not is_pattern(target) or not fnmatch.fnmatchcase(name, target):
        return None
    return 0 if target == "*" else 1


def narrower(a: ToolMode, b: ToolMode) -> ToolMode:
    """The mode of ``a`` and ``b`` that exposes the tool less."""
    return a if _EXPOSURE[a] <= _EXPOSURE[b] else b


@strict_keywords(ToolSettingKeywordError)
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
        """The mode this layer gives ``name``, or ``None`` when no entry targets it.

        The most specific matching entry decides; among equally specific ones the
        strongest mode (see the module docstring).
        """
        best: tuple[int, int] | None = None
        chosen: ToolMode | None = None
        for target, mode in self.modes.items():
            level = _specificity(target, name)
            if level is None:
                continue
            rank = (level, _STRENGTH[mode])
            if best is None or rank > best:
                best, chosen = rank, mode
        return chosen

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

    def within(self, ceiling: ToolsView) -> bool:
        """Whether no tool is more exposed here than in ``ceiling`` (unknown there: hidden)."""
        for name, mode in self.modes.items():
            top = ceiling.modes.get(name)
            if top is None:
                if mode is not ToolMode.DISABLED:
                    return False
            elif _EXPOSURE[mode] > _EXPOSURE[top]:
                return False
        return True

    def capped(self, ceiling: ToolsView) -> ToolsView:
        """This view with each mode capped at ``ceiling``'s; names ``ceiling`` lacks are dropped."""
        return ToolsView(
            {
                name: narrower(mode, ceiling.modes[name])
                for name, mode in self.modes.items()
                if name in ceiling.modes
            }
        )

    def apply(self, scope: ToolsScope) -> ToolsView:
        """This view with one more layer on top (free: not capped, see ``resolve``)."""
        if not scope.modes:
            return self
        out = dict(self.modes)
        for name in out:
            mode = scope.mode_for(name)
            if mode is not None:
                out[name] = mode
        return ToolsView(out)

    def stack(self, scopes: Iterable[ToolsScope] | ToolsScope) -> ToolsView:
        """This view with ``scopes`` (one layer, or several in order) applied; later layers
        win; not capped."""
        view = self
        for scope in scopes if isinstance(scopes, Iterable) else (scopes,):  # one layer
            if not isinstance(scope, ToolsScope):
                raise ToolSettingError(
                    f"scope layers are ToolsScope values, not {type(scope).__name__}; "
                    "pass [ToolsScope({...}), ...]"
                )
            view = view.apply(scope)
        return view

    @classmethod
    def resolve(
        cls, base: Mapping[str, ToolMode | str], scopes: Iterable[ToolsScope] | ToolsScope = ()
    ) -> ToolsView:
        """Resolve ``scopes`` over the global modes ``base`` (tool name -> mode).

        ``base`` is the ceiling: the result is ``base`` with the layers stacked on
        it, each tool capped at its mode in ``base``, so layers can only narrow.
        """
        ceiling = cls(base)
        return ceiling.stack(scopes).capped(ceiling)

    def to_dict(self) -> dict[str, Any]:
        """``{name: mode string}``, e.g. for display or logs."""
        return {n: m.value for n, m in sorted(self.modes.items())}
