# SPDX-License-Identifier: MIT
"""JSON's values as JSON schema sees them, over the Python values ``json`` reads.

JSON has one number type, so a value's JSON type is not its Python type: ``True``
is a boolean and never a number (Python calls it an ``int``), ``3.0`` is an integer
(``_validate`` turns it into ``3``), a tuple is an array. Equality is JSON schema's
(``enum``, ``const``, ``uniqueItems``, and the toolbox's repeat budget): ``1``
equals ``1.0`` and key order does not count, but ``true`` is not ``1`` and ``1`` is
not ``"1"``, at any depth.

Invariants: ``TYPE_NAMES`` and ``IS_TYPE`` are the one table of JSON type names
(``_schema`` writes schemas from it, ``_convert`` and ``_validate`` check against
it); two values are equal exactly when their ``canonical_json`` texts are. Nothing
here raises on a value: what JSON cannot encode is compared by its ``repr``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeGuard

#: Python type -> JSON type name; ``_schema`` and ``_convert`` read scalars from here too.
TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def json_type(value: Any) -> str:
    for py, name in TYPE_NAMES.items():
        if type(value) is py:
            return name
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_number(value: object) -> TypeGuard[float]:
    """A JSON number (``bool`` is not one, though Python says it is an ``int``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: JSON type name -> whether a value is of it (``_validate``'s ``_match_type`` also
#: normalises ``3.0``).
IS_TYPE: dict[str, Callable[[Any], bool]] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": is_number,
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, dict),
}


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints (JSON schema equality), for ``uniqueItems``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Canonical JSON: equal for values JSON schema calls equal (key order, ``1``/``1.0``),
    different across types (``true``, ``1`` and ``"1"`` encode differently). The identity
    of a value for ``uniqueItems`` and of a call's arguments for the repeat budget."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), default=repr)


def json_equal(a: Any, b: Any) -> bool:
    """JSON schema equality (``enum``, ``const``): ``1`` equals ``1.0``, but ``true`` is
    not ``1`` and ``false`` not ``0`` (Python's ``==`` says they are), at any depth."""
    return one_of(a, [b])


def one_of(value: Any, allowed: list[Any]) -> bool:
    """Whether ``value`` is JSON-schema equal to one of ``allowed`` (by ``canonical_json``)."""
    key = canonical_json(value)
    return any(canonical_json(v) == key for v in allowed)
