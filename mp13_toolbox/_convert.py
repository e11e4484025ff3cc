# SPDX-License-Identifier: MIT
"""The package's one cattrs converter.

Used to (un)structure toolbox snapshots, to turn tool return values into JSON, and
to build a tool's typed arguments (enums, attrs classes, dataclasses, tuples)
from the validated JSON the model sent. Enums travel as their values.

cattrs cannot structure unions of plain types (``int | str``) on its own; the
hook below picks the first member whose JSON shape fits the value. The value
was already validated against the tool's schema, so "fits" only has to choose,
not to check.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs

from mp13_toolbox._validate import IS_TYPE, TYPE_NAMES

converter = cattrs.Converter(forbid_extra_keys=False)

# Scalar annotation -> whether a JSON value fits it: ``_validate``'s check of its JSON type.
_SCALAR_FITS: dict[Any, Callable[[Any], bool]] = {
    py: IS_TYPE[name] for py, name in TYPE_NAMES.items() if py not in (dict, list)
}
_SEQUENCE_ORIGINS = (list, tuple, set, frozenset)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _fits(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    if tp in _SCALAR_FITS:
        return _SCALAR_FITS[tp](value)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin is typing.Annotated:
        return _fits(value, typing.get_args(tp)[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return any(value == m.value for m in tp)
    kind = origin or tp
    if isinstance(kind, type) and issubclass(kind, _SEQUENCE_ORIGINS):
        return isinstance(value, (list, tuple))
    if isinstance(value, dict):
        return True  # dict, Mapping, attrs class, dataclass, TypedDict: let cattrs decide
    return not (attrs.has(tp) or (isinstance(tp, type) and dataclasses.is_dataclass(tp)))


def _structure_union(value: Any, tp: Any) -> Any:
    members = typing.get_args(tp)
    for member in members:
        if _fits(value, member):
            try:
                return converter.structure(value, member)
            except Exception:  # try the next member; the last resort is the raw value
                continue
    return value


converter.register_structure_hook_func(_is_union, _structure_union)


def error_text(exc: BaseException) -> str:
    """``cattrs.transform_error`` text for users instead of a raw exception group."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return f"{type(exc).__name__}: {exc}"
