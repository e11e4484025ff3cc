# SPDX-License-Identifier: MIT
"""Strict checks of decoded JSON against the stored types, for data from outside (imports).

``checker_for(tp)`` builds a checker from a type annotation: each value must have
exactly the type its field declares (no ``"5"`` for ``5``, no ``1`` for
``true``, finite numbers only), enums hold known values, and attrs classes are
walked field by field from their annotations, so a new field is checked
without a change here (a field type with no checker fails when this module is
imported, not on a user's file). Tool scopes, stored in their own format, have a
hand-written checker; fields stored under another name (a command's ``at``) are
listed in ``_STORED_AS``. ``check_shape`` bounds nesting and string sizes and
refuses lone surrogates, without recursion.

A failure is a ``SerializationError`` whose ``where`` is the path to the value
(``conversations[0].nodes[3].turn.text``). Checkers never convert or fix data.
"""

from __future__ import annotations

import enum
import math
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs

from mp13_context._errors import SerializationError
from mp13_context._model import Command, ConversationInfo, Node, SavedPosition, Turn
from mp13_context._text import has_surrogates
from mp13_toolbox import ToolMode, ToolsScope

Path = tuple[str | int, ...]


def fmt(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "the document"


HINT = "import only files written by Session.export_json"
LIMIT_HINT = "if the file is yours, raise the bound with limits=ImportLimits(...)"


def fail(path: Path, message: str, node_id: Any = None, hint: str = HINT) -> SerializationError:
    where = fmt(path)
    if isinstance(node_id, str):
        where += f" (node {node_id})"
    return SerializationError(
        f"import refused, nothing was written: {where}: {message}; {hint}", where=where
    )


def kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --- shape and size ----------------------------------------------------------------------


def check_shape(doc: Any, max_nesting: int, max_text: int) -> None:
    """Nesting, string sizes and lone surrogates, without recursion."""
    stack: list[tuple[Any, int, Path]] = [(doc, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            if len(value) > max_text:
                raise fail(
                    path,
                    f"a string of {len(value)} characters (limit {max_text})",
                    hint=LIMIT_HINT,
                )
            if has_surrogates(value):
                raise fail(path, "text with a lone surrogate, which UTF-8 cannot store")
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > max_nesting:
            raise fail(path, f"nested deeper than {max_nesting} levels", hint=LIMIT_HINT)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise fail(path, f"a key of type {kind_of(key)}; keys are strings")
                if has_surrogates(key) or len(key) > max_text:
                    raise fail(path, "a key with a lone surrogate or too long")
                stack.append((item, depth + 1, (*path, key)))
        else:
            stack.extend((item, depth + 1, (*path, i)) for i, item in enumerate(value))


# --- types -----------------------------------------------------------------------------

Checker = Callable[[Any, Path], None]


_MAX_FLOAT = int(sys.float_info.max)


def _scalar(expected: type, what: str) -> Checker:
    def check(value: Any, path: Path) -> None:
        ok = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
        if expected is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            # An int too big for a float (10**400) would raise OverflowError in isfinite.
            if ok:
                ok = abs(value) <= _MAX_FLOAT if isinstance(value, int) else math.isfinite(value)
        if not ok:
            raise fail(path, f"expected {what}, got {kind_of(value)} {value!r:.60}")

    return check


_SCALARS: dict[Any, Checker] = {
    str: _scalar(str, "a string"),
    int: _scalar(int, "an integer"),
    float: _scalar(float, "a finite number"),
    bool: _scalar(bool, "true or false"),
    Any: lambda value, path: None,  # any JSON value: bounded by the shape check
}


def _enum(cls: type[enum.Enum]) -> Checker:
    values = tuple(m.value for m in cls)

    def check(value: Any, path: Path) -> None:
        if not isinstance(value, str) or value not in values:
            raise fail(path, f"expected one of {list(values)}, got {value!r:.60}")

    return check


def checker_for(tp: Any) -> Checker:
    """A strict checker of JSON data for the type annotation ``tp``."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    if tp in _SPECIAL:
        return _SPECIAL[tp]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if isinstance(tp, type) and attrs.has(tp):
        return _record(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        check = checker_for(inner[0]) if len(inner) == 1 else _SCALARS[Any]

        def optional(value: Any, path: Path) -> None:
            if value is not None or type(None) not in args:
                check(value, path)

        return optional
    if origin in (tuple, list):
        item = checker_for(args[0])

        def sequence(value: Any, path: Path) -> None:
            if not isinstance(value, list):
                raise fail(path, f"expected a list, got {kind_of(value)}")
            for i, v in enumerate(value):
                item(v, (*path, i))

        return sequence
    if origin is dict:
        item = checker_for(args[1])

        def mapping(value: Any, path: Path) -> None:
            if not isinstance(value, dict):
                raise fail(path, f"expected an object, got {kind_of(value)}")
            for k, v in value.items():
                item(v, (*path, k))

        return mapping
    raise TypeError(f"no import checker for {tp!r}")  # a new field type: add it here


# Fields the converter stores under another name, or leaves out (None; see ``_convert``).
_STORED_AS: dict[type, dict[str, str | None]] = {
    Turn: {"node_id": None},
    Command: {"created_at": "at"},
}


def _record(cls: type) -> Checker:
    hints = typing.get_type_hints(cls)
    stored = _STORED_AS.get(cls, {})
    fields = [
        (key, checker_for(hints[f.name]), f.default is attrs.NOTHING)
        for f in attrs.fields(cls)
        if (key := stored.get(f.name, f.name)) is not None
    ]
    name = cls.__name__

    def check(value: Any, path: Path) -> None:
        if not isinstance(value, dict):
            raise fail(path, f"expected a {name} object, got {kind_of(value)}")
        for field, field_check, required in fields:
            if field in value:
                field_check(value[field], (*path, field))
            elif required:
                raise fail(path, f"the {name} has no {field!r}")

    return check


def _check_scope(value: Any, path: Path) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("modes", {}), dict):
        raise fail(path, "expected a tools scope {'modes': {name: mode}, 'label': ...}")
    mode = _enum(ToolMode)
    for k, v in value.get("modes", {}).items():
        mode(v, (*path, "modes", k))
    _SCALARS[str](value.get("label", ""), (*path, "label"))


# Types stored in their own format (hooks in ``_convert``), checked by hand.
_SPECIAL: dict[Any, Checker] = {ToolsScope: _check_scope}

CHECK_INFO = _record(ConversationInfo)
CHECK_NODE = _record(Node)  # built here: a field type without a checker fails at import time
CHECK_POSITION = _record(SavedPosition)
