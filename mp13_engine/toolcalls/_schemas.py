# SPDX-License-Identifier: Apache-2.0
"""Reading a tool's parameters schema: the part that shapes a value, the types it allows.

The raw-text formats (``_raw_values``) convert a value by its parameter's schema, and the
pythonic formats map positional arguments by the schema's property order; both read the
schema here, as the toolbox's validation reads it, so what a value is converted to is
what validation then checks.

Invariants: a ``$ref`` is resolved against the tool's whole parameters schema
(``root``) by the toolbox's one resolver, ``mp13_toolbox.resolve_ref``: only local refs
(``#``, ``#/$defs/X``, Draft 4's ``#/definitions/X``, any JSON pointer into the schema);
another document or an anchor names nothing here. Each walk carries the refs it is inside
(``seen``), so a ref cycle (``A -> B -> A``, or ``{"$ref": "#"}`` inside the root) is
followed once and ends: a spec never makes a parser loop or raise. OpenAPI 3.0 / Draft 4's
``"nullable": true`` reads as ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from mp13_toolbox import resolve_ref


def parameter_names(schemas: Mapping[str, Mapping[str, Any]], tool: str) -> Mapping[str, Any]:
    """``tool``'s parameter schemas by name, in schema order (empty when unknown)."""
    root = schemas.get(tool)
    props = (shape_schema(root, "object", root) or {}).get("properties")
    return props if isinstance(props, Mapping) else {}


#: The keyword that describes the inside of a value of each container type.
_INSIDE = MappingProxyType(
    {"object": ("properties", "additionalProperties"), "array": ("items", "prefixItems")}
)


def shape_schema(
    schema: Any, kind: str, root: Any, seen: frozenset[str] = frozenset()
) -> Mapping[str, Any] | None:
    """The part of ``schema`` that describes the inside of a ``kind`` value (``"object"``:
    its properties; ``"array"``: its items): ``schema`` itself when it says, else the first
    ``$ref`` target or ``anyOf``/``oneOf``/``allOf`` option that does (``Node | None``
    reaches ``Node``'s properties); None when nothing does."""
    if not isinstance(schema, Mapping):
        return None
    if any(key in schema for key in _INSIDE[kind]):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        found = shape_schema(resolve_ref(root, ref), kind, root, seen | {ref})
        if found is not None:
            return found
    for key in ("anyOf", "oneOf", "allOf"):
        for option in _options(schema, key):
            found = shape_schema(option, kind, root, seen)
            if found is not None:
                return found
    return None


def property_schema(params: Mapping[str, Any] | None, key: str) -> Any:
    """The schema of an object's ``key`` (from ``shape_schema(..., "object", ...)``): its
    property's, else an ``additionalProperties`` schema (``dict[str, X]``), else None."""
    if params is None:
        return None
    props = params.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    extra = params.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _options(schema: Mapping[str, Any], key: str) -> list[Any]:
    """A schema's ``anyOf``/``oneOf``/``allOf`` list (empty when absent or malformed)."""
    options = schema.get(key)
    return options if isinstance(options, list) else []


def _allows(types: list[str], kind: str) -> bool:
    """Whether a value of JSON type ``kind`` may have one of ``types`` (an integer is a
    number)."""
    return kind in types or (kind == "integer" and "number" in types)


def schema_types(schema: Any, root: Any = None, seen: frozenset[str] = frozenset()) -> list[str]:
    """The JSON types ``schema`` allows (empty: it does not say), following local ``$ref``s
    against ``root`` and reading OpenAPI 3.0 / Draft 4's ``"nullable": true`` as ``null``."""
    if not isinstance(schema, Mapping):
        return []
    kind = schema.get("type")
    types: list[str] = []
    if isinstance(kind, str):
        types = [kind]
    elif isinstance(kind, list):
        types = [k for k in kind if isinstance(k, str)]
    else:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            types.extend(schema_types(resolve_ref(root, ref), root, seen | {ref}))
        for key in ("anyOf", "oneOf"):
            for sub in _options(schema, key):
                types.extend(schema_types(sub, root, seen))
        # allOf: every member holds, so only the types each typed member allows
        typed = [t for t in (schema_types(s, root, seen) for s in _options(schema, "allOf")) if t]
        if typed:
            types.extend(k for k in typed[0] if all(_allows(t, k) for t in typed[1:]))
        if not types and isinstance(schema.get("enum"), list):
            types = sorted({_json_type(v) for v in schema["enum"]})
    if types and schema.get("nullable") is True and "null" not in types:
        types.append("null")
    return types


# The JSON type of an enum value, by the first class it is an instance of (bool before int).
_ENUM_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (type(None), "null"))


def _json_type(value: Any) -> str:
    return next((name for cls, name in _ENUM_TYPES if isinstance(value, cls)), "string")
