# SPDX-License-Identifier: MIT
"""Effective settings: the fold of the commands along a node's path from the root.

``EffectiveSettings`` is what a node's commands resolve to: the system message,
the adapters, the tool scope layers and the generation parameters. It is a
frozen value computed from the commands (not runtime state). ``apply(settings,
cmd, ...)`` is the one fold step, one ``match`` arm per command kind; the
session computes every node's settings once, when the node is appended (or
when a command is appended to a childless node), stores them interned by
content and caches them, so resolving the settings at any node is one lookup
however deep the node is.

``pop`` commands undo the last command of their family on the path. To keep each
stored value O(1) in size, it does not hold the undo stack itself but, per
family, the id of the (interned) settings that were current before that family's
last command (``system_prev`` ...). Popping follows that link. A pop with nothing
to undo is rejected by ``check_command`` (``CommandError``), which the fold runs
before anything is recorded.

Parameters are validated by a registry of per-name validators (``PARAMS``):
those that become ``Request`` fields by the engine's own rules, so the context
never accepts a value the engine would refuse; ``check_command`` runs the
engine's checks that span fields on what a ``params.set`` leaves (``top_logprobs``
needs ``logprobs``), so a branch never holds parameters every request refuses.
A parameter set to ``None`` goes back to its default. Adapter names go through the engine's rule for
``Request.adapters`` too (``adapter_names``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from mp13_context._errors import CommandError
from mp13_context._model import Command, CommandKind, as_tuple
from mp13_engine import Request, RequestError, check_request_field
from mp13_toolbox import ToolsScope, did_you_mean


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


@attrs.frozen(kw_only=True)
class EffectiveSettings:
    """System message, adapters, tool scope layers and parameters at a node.

    ``adapters``: ``None`` = the engine's default, ``()`` = the base model.
    ``params``: only the parameters set on the path (see ``PARAMS``).
    ``system_prev``, ``adapters_prev``, ``tools_prev``: the undo links (see the module
    docstring), ids in one session's table of settings: the same node of an imported
    copy has other ids there, so compare the settings of two sessions without them.
    """

    system: SystemPrompt = attrs.field(factory=SystemPrompt)
    adapters: tuple[str, ...] | None = None
    tool_scopes: tuple[ToolsScope, ...] = attrs.field(default=(), converter=as_tuple)
    params: dict[str, Any] = attrs.field(factory=dict, hash=False)
    system_prev: int | None = None
    adapters_prev: int | None = None
    tools_prev: int | None = None


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
    "min_p",
    "repetition_penalty",
    "seed",
    "stop",
    "timeout_s",
    "logprobs",
    "top_logprobs",
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
            hint = did_you_mean(str(name), PARAMS)
            raise CommandError(f"unknown parameter {name!r}{hint}; known parameters: {known}")
        out[name] = None if value is None else check(name, value)
    return out


def check_request_params(params: Mapping[str, Any]) -> None:
    """``CommandError`` unless the request parameters among ``params`` go together.

    Each value was checked on its own (``validate_params``); this runs ``Request``'s checks
    that span fields (``top_logprobs`` needs ``logprobs=True``), so a branch's parameters
    can never make every later request from it fail, and an ``ask`` whose overrides do
    not fit is refused before its user turn is recorded.
    """
    try:
        Request(prompt="x", **{name: params[name] for name in REQUEST_PARAMS if name in params})
    except RequestError as exc:
        raise CommandError(str(exc)) from exc


def adapter_names(names: str | Sequence[str]) -> tuple[str, ...]:
    """``names`` (one name or a sequence of them) as ``Request.adapters`` holds them, by the
    engine's own rule: one normalisation for both layers. ``CommandError`` otherwise."""
    return tuple(_request_field("adapters", names) or ())


# --- the fold ----------------------------------------------------------------------------

SettingsLookup = Callable[[int], EffectiveSettings]

# Pop kind -> (the field it restores, the field holding the undo link, the family's name).
_POPS: dict[CommandKind, tuple[str, str, str]] = {
    CommandKind.SYSTEM_POP: ("system", "system_prev", "system"),
    CommandKind.ADAPTERS_POP: ("adapters", "adapters_prev", "adapters"),
    CommandKind.TOOLS_POP: ("tool_scopes", "tools_prev", "tools"),
}
#: The handle method that returns a family to its starting point (for the pop error).
_BACK_TO_START = {"system": "default", "adapters": "default", "tools": "reset"}


def _pop(
    settings: EffectiveSettings, kind: CommandKind, lookup: SettingsLookup
) -> EffectiveSettings:
    field, link, _ = _POPS[kind]
    prev_id = getattr(settings, link)
    if prev_id is None:
        return settings  # nothing to undo: recorded pops are refused by ``check_command``
    prev = lookup(prev_id)
    return attrs.evolve(settings, **{field: getattr(prev, field), link: getattr(prev, link)})


def _system_added(system: SystemPrompt, text: str) -> SystemPrompt:
    base = system.text if system.mode is SystemMode.TEXT else ""
    return SystemPrompt(SystemMode.TEXT, f"{base}\n\n{text}" if base else text)


def changed_params(params: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with ``changes`` applied: a value of ``None`` removes the parameter (back
    to its default). A ``params.set`` command and request overrides both work so."""
    out = dict(params)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def apply(
    settings: EffectiveSettings, settings_id: int | None, cmd: Command, lookup: SettingsLookup
) -> EffectiveSettings:
    """The settings after ``cmd``. ``settings_id`` is ``settings``' interned id (the undo
    link a system, adapters or tools command records)."""
    s, sid, evolve = settings, settings_id, attrs.evolve
    match cmd.kind:
        case CommandKind.SYSTEM_SET:
            return evolve(s, system=SystemPrompt(SystemMode.TEXT, cmd.text or ""), system_prev=sid)
        case CommandKind.SYSTEM_ADD:
            return evolve(s, system=_system_added(s.system, cmd.text or ""), system_prev=sid)
        case CommandKind.SYSTEM_NONE:
            return evolve(s, system=SystemPrompt(SystemMode.NONE), system_prev=sid)
        case CommandKind.SYSTEM_DEFAULT:
            return evolve(s, system=SystemPrompt(), system_prev=sid)
        case CommandKind.ADAPTERS_SET:
            return evolve(s, adapters=tuple(cmd.names), adapters_prev=sid)
        case CommandKind.ADAPTERS_ADD:
            have = s.adapters or ()
            added = tuple(n for n in cmd.names if n not in have)
            return evolve(s, adapters=have + added, adapters_prev=sid)
        case CommandKind.ADAPTERS_DEFAULT:
            return evolve(s, adapters=None, adapters_prev=sid)
        case CommandKind.TOOLS_SET:
            return evolve(s, tool_scopes=(cmd.scope,), tools_prev=sid)
        case CommandKind.TOOLS_ADD:
            return evolve(s, tool_scopes=(*s.tool_scopes, cmd.scope), tools_prev=sid)
        case CommandKind.TOOLS_RESET:
            return evolve(s, tool_scopes=(), tools_prev=sid)
        case CommandKind.PARAMS_SET:
            return evolve(s, params=changed_params(s.params, cmd.params))
        case CommandKind.SYSTEM_POP | CommandKind.ADAPTERS_POP | CommandKind.TOOLS_POP:
            return _pop(s, cmd.kind, lookup)
        case CommandKind.LOG | CommandKind.API_CALL:
            return s


# What a command of each kind carries, checked before it is recorded: (field, type, fix).
_SCOPE = ("scope", ToolsScope, "tools.set/tools.add take a ToolsScope; pass ToolsScope({...})")
_CARRIES: dict[CommandKind, tuple[str, type, str]] = {
    CommandKind.SYSTEM_SET: ("text", str, "system.set takes the system message as a string"),
    CommandKind.SYSTEM_ADD: ("text", str, "system.add takes the text to add as a string"),
    CommandKind.TOOLS_SET: _SCOPE,
    CommandKind.TOOLS_ADD: _SCOPE,
    CommandKind.LOG: ("text", str, "log takes the note as a string"),
    CommandKind.API_CALL: ("text", str, "record_call takes the call's name as a string"),
}


def checked_fields(cmd: Command) -> Command:
    """``cmd`` with the fields its kind uses checked (``CommandError``) and its params
    normalised; every command passes here before it is stored."""
    if not isinstance(cmd, Command):
        raise CommandError(f"a command is a Command, not {type(cmd).__name__}")
    carries = _CARRIES.get(cmd.kind)
    if carries is not None and not isinstance(value := getattr(cmd, carries[0]), carries[1]):
        raise CommandError(f"{carries[2]} (got {type(value).__name__})")
    if cmd.kind is CommandKind.PARAMS_SET:
        return attrs.evolve(cmd, params=validate_params(cmd.params))
    return cmd


def check_command(settings: EffectiveSettings, cmd: Command) -> None:
    """Reject a command that cannot apply at ``settings`` (before it is recorded): a pop
    with nothing to undo, or parameters that would not go together with those set
    before them (``check_request_params``)."""
    if cmd.kind is CommandKind.PARAMS_SET:
        check_request_params(changed_params(settings.params, cmd.params))
    pop = _POPS.get(cmd.kind)
    if pop is not None and getattr(settings, pop[1]) is None:
        family = pop[2]
        raise CommandError(
            f"nothing to pop: no {family} command on this branch; "
            f"use {family}.set(...) or {family}.{_BACK_TO_START[family]}() instead"
        )
