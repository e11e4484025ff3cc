# SPDX-License-Identifier: MIT
"""Effective state: the fold of the commands along a node's path from the root.

``EffectiveState`` is what a node's commands resolve to: the system message,
the adapters, the tool scope layers and the generation parameters. It is a
frozen value. ``apply(state, cmd, ...)`` is the one fold step; the session
computes every node's state once, when the node is appended (or when a command
is appended to a childless node), stores it interned by content and caches it,
so resolving the state at any node is one lookup however deep the node is.

``pop`` commands undo the last command of their family on the path. To keep each
stored state O(1) in size, a state does not hold the undo stack itself but, per
family, the id of the (interned) state that was current before that family's last
command (``system_prev`` ...). Popping follows that link. A pop with nothing to
undo is rejected when recorded (``CommandError``) and is a no-op in the fold.

Parameters are validated by a registry of per-name validators (``PARAMS``):
those that become ``Request`` fields by the engine's own rules, so the context
never accepts a value the engine would refuse. A parameter set to ``None``
goes back to its default.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from mp13_context._errors import CommandError
from mp13_context._model import Command, CommandKind
from mp13_engine import RequestError, check_request_field


class SystemMode(str, enum.Enum):
    """``DEFAULT``: send no system message (the chat template's default applies).
    ``NONE``: send an empty system message, so templates that inject a default
    system prompt do not. ``TEXT``: send ``text``."""

    DEFAULT = "default"
    NONE = "none"
    TEXT = "text"


@attrs.frozen
class SystemPrompt:
    """The effective system message."""

    mode: SystemMode = attrs.field(default=SystemMode.DEFAULT, converter=SystemMode)
    text: str = ""

    def message(self) -> dict[str, Any] | None:
        """The system message to send, or ``None`` to send none."""
        if self.mode is SystemMode.DEFAULT:
            return None
        return {"role": "system", "content": self.text if self.mode is SystemMode.TEXT else ""}


def _tuple(value: Any) -> tuple:
    return tuple(value) if value is not None else ()


@attrs.frozen(kw_only=True)
class EffectiveState:
    """System message, adapters, tool scope layers and parameters at a node.

    ``adapters``: ``None`` = the engine's default, ``()`` = the base model.
    ``params``: only the parameters set on the path (see ``PARAMS``).
    """

    system: SystemPrompt = attrs.field(factory=SystemPrompt)
    adapters: tuple[str, ...] | None = None
    tool_scopes: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    params: dict[str, Any] = attrs.field(factory=dict, hash=False)
    system_prev: int | None = None
    adapters_prev: int | None = None
    tools_prev: int | None = None

    def param(self, name: str, default: Any = None) -> Any:
        """A parameter's value on this path, or ``default`` when it is not set."""
        return self.params.get(name, default)


# --- parameters --------------------------------------------------------------------------


def _int(lo: int) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise CommandError(f"parameter {name} must be an integer >= {lo}, got {value!r}")
        return value

    return check


def _request_field(name: str, value: Any) -> Any:
    """The engine's own check of the ``Request`` field ``name``: one rule for both layers."""
    try:
        checked = check_request_field(name, value)
    except RequestError as exc:
        raise CommandError(str(exc)) from exc
    # Stored in commands as JSON: lists, as they come back from the store.
    return list(checked) if isinstance(checked, tuple) else checked


#: Parameters copied into ``Request`` as fields of the same name; their values are checked
#: by the engine's rules (``mp13_engine.check_request_field``), so a value the context
#: accepts is one ``Request`` accepts. ``temperature=0`` is greedy decoding, a positive
#: temperature samples (see ``Request``).
REQUEST_PARAMS = (
    "max_new_tokens",
    "min_new_tokens",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "seed",
    "stop",
    "timeout_s",
)

#: Runner defaults for the runner parameters when a path does not set them.
RUNNER_DEFAULTS: Mapping[str, int] = MappingProxyType(
    {
        "max_tool_rounds": 5,
        "max_tool_calls": 16,
        "max_continuations": 0,
    }
)

#: Parameter name -> validator (read-only). The request parameters first; the rest steer
#: the runner (tool rounds, tool calls per turn, continuations).
PARAMS: Mapping[str, Callable[[str, Any], Any]] = MappingProxyType(
    {
        **{name: _request_field for name in REQUEST_PARAMS},
        "max_tool_rounds": _int(0),
        "max_tool_calls": _int(1),
        "max_continuations": _int(0),
    }
)


def validate_params(params: dict[str, Any]) -> dict[str, Any]:
    """Check names and values; ``None`` values mean "back to the default"."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        check = PARAMS.get(name)
        if check is None:
            known = ", ".join(sorted(PARAMS))
            raise CommandError(f"unknown parameter {name!r}; known parameters: {known}")
        out[name] = None if value is None else check(name, value)
    return out


# --- the fold ----------------------------------------------------------------------------

StateLookup = Callable[[int], EffectiveState]


def _pop(
    state: EffectiveState, prev_id: int | None, lookup: StateLookup, field: str
) -> EffectiveState:
    if prev_id is None:
        return state  # nothing to undo: recorded pops are checked by ``check_command``
    prev = lookup(prev_id)
    link = f"{field}_prev" if field != "tool_scopes" else "tools_prev"
    return attrs.evolve(state, **{field: getattr(prev, field), link: getattr(prev, link)})


def _system(
    state: EffectiveState, sid: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    kind = cmd.kind
    if kind is CommandKind.SYSTEM_POP:
        return _pop(state, state.system_prev, lookup, "system")
    if kind is CommandKind.SYSTEM_SET:
        new = SystemPrompt(SystemMode.TEXT, cmd.text or "")
    elif kind is CommandKind.SYSTEM_ADD:
        cur = state.system
        base = cur.text if cur.mode is SystemMode.TEXT and cur.text else ""
        new = SystemPrompt(
            SystemMode.TEXT, f"{base}\n\n{cmd.text or ''}" if base else cmd.text or ""
        )
    elif kind is CommandKind.SYSTEM_NONE:
        new = SystemPrompt(SystemMode.NONE)
    else:
        new = SystemPrompt(SystemMode.DEFAULT)
    return attrs.evolve(state, system=new, system_prev=sid)


def _adapters(
    state: EffectiveState, sid: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    kind = cmd.kind
    if kind is CommandKind.ADAPTERS_POP:
        return _pop(state, state.adapters_prev, lookup, "adapters")
    if kind is CommandKind.ADAPTERS_SET:
        new: tuple[str, ...] | None = tuple(cmd.names)
    elif kind is CommandKind.ADAPTERS_ADD:
        new = tuple(state.adapters or ()) + tuple(
            n for n in cmd.names if n not in (state.adapters or ())
        )
    else:
        new = None
    return attrs.evolve(state, adapters=new, adapters_prev=sid)


def _tools(
    state: EffectiveState, sid: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    kind = cmd.kind
    if kind is CommandKind.TOOLS_POP:
        return _pop(state, state.tools_prev, lookup, "tool_scopes")
    if kind is CommandKind.TOOLS_SET:
        new: tuple[Any, ...] = (cmd.scope,)
    elif kind is CommandKind.TOOLS_ADD:
        new = (*state.tool_scopes, cmd.scope)
    else:
        new = ()
    return attrs.evolve(state, tool_scopes=new, tools_prev=sid)


def _params(
    state: EffectiveState, sid: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    params = dict(state.params)
    for name, value in cmd.params.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    return attrs.evolve(state, params=params)


def _no_state(
    state: EffectiveState, sid: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    return state


# Command family -> fold step. Log notes and API calls do not change the state.
_FOLD: dict[str, Callable[[EffectiveState, int | None, Command, StateLookup], EffectiveState]] = {
    "system": _system,
    "adapters": _adapters,
    "tools": _tools,
    "params": _params,
    "log": _no_state,
    "api_call": _no_state,
}


def apply(
    state: EffectiveState, state_id: int | None, cmd: Command, lookup: StateLookup
) -> EffectiveState:
    """The state after ``cmd``. ``state_id`` is ``state``'s interned id (for undo links)."""
    return _FOLD[cmd.kind.family](state, state_id, cmd, lookup)


def changes_state(cmd: Command) -> bool:
    """Whether ``cmd`` can change the effective state."""
    return cmd.kind.family not in ("log", "api_call")


_POP_LINKS = {
    CommandKind.SYSTEM_POP: ("system_prev", "system"),
    CommandKind.ADAPTERS_POP: ("adapters_prev", "adapters"),
    CommandKind.TOOLS_POP: ("tools_prev", "tools"),
}


def check_command(state: EffectiveState, cmd: Command) -> None:
    """Reject a command that cannot apply at ``state`` (before it is recorded)."""
    link = _POP_LINKS.get(cmd.kind)
    if link is not None and getattr(state, link[0]) is None:
        raise CommandError(
            f"nothing to pop: no {link[1]} command on this branch; "
            f"use {link[1]}.set(...) or {link[1]}.reset()/default instead"
        )
    if cmd.kind in (CommandKind.TOOLS_SET, CommandKind.TOOLS_ADD) and cmd.scope is None:
        raise CommandError("tools.set/tools.add need a ToolsScope; pass ToolsScope({...})")
