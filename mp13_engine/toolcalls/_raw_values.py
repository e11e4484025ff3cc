# SPDX-License-Identifier: Apache-2.0
"""Raw-text parameter values, converted by the tool's schema (the XML-like formats).

Formats such as qwen3_coder, glm45, minimax_m2 and functiongemma write each argument as
raw text between tags (``<parameter=n>42</parameter>``), so a value's JSON type is not in
the text: it comes from the parameter's schema (``_schemas``). A ``string`` parameter keeps
its exact text even when it looks numeric; other types are converted when the text fits;
without a schema, or when nothing fits, the value is a best-effort literal guess
(``guess_value``). Converting never raises: a value that fits no type stays its guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mp13_engine.toolcalls._schemas import property_schema, schema_types, shape_schema
from mp13_engine.toolcalls._values import PayloadError, dumps, guess_value


def raw_arguments(
    schemas: Mapping[str, Mapping[str, Any]], tool: str, pairs: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """``(key, raw text)`` pairs as ``tool``'s arguments: keys stripped, each value converted
    with its parameter's schema when known (the raw-text formats' arguments). A parameter's
    ``$ref`` is resolved against the tool's whole parameters schema."""
    root = schemas.get(tool)
    params = shape_schema(root, "object", root)
    return {
        key.strip(): convert_value(raw, property_schema(params, key.strip()), root)
        for key, raw in pairs
    }


def strip_layout(raw: str) -> str:
    """A raw parameter value without the one newline of layout right after its opening tag
    and right before its closing tag (templates write each value on lines of its own)."""
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


def raw_text(value: Any) -> str:
    """A parameter value written as raw text, as templates do: a string as is, else JSON."""
    return value if isinstance(value, str) else dumps(value)


def _as_type(raw: str, kind: str) -> Any:
    """Convert ``raw`` to JSON type ``kind`` or raise ``ValueError``."""
    text = raw.strip()
    if kind == "string":
        return raw
    if kind in ("integer", "number"):
        value = guess_value(text)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(raw)
        if kind == "number":
            return value
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(raw)
        return int(value)
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(raw)
    if kind == "null":
        if text.lower() in ("null", "none", ""):
            return None
        raise ValueError(raw)
    if kind in ("object", "array"):
        value = guess_value(text)
        if (kind == "object") != isinstance(value, dict) or (
            kind == "array" and not isinstance(value, list)
        ):
            raise ValueError(raw)
        return value
    raise ValueError(kind)


def convert_value(raw: str, schema: Any, root: Any = None) -> Any:
    """A raw-text parameter value as JSON, following its schema when one is known.

    A ``string`` parameter stays the exact text even if it looks numeric; other
    types are converted when the text fits, trying a union's types with
    ``string`` last; otherwise (or without a schema) a best-effort literal guess.
    ``root``: the tool's parameters schema, which the schema's local ``$ref``s name
    (``#/$defs/Node``); ``"nullable": true`` adds ``null`` to the types.
    """
    types = schema_types(schema, root)
    if not types:
        return guess_value(raw)
    for kind in sorted(types, key=lambda k: k == "string"):
        try:
            return _as_type(raw, kind)
        except (ValueError, PayloadError):
            continue
    return guess_value(raw)
