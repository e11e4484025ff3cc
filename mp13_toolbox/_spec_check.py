# SPDX-License-Identifier: MIT
"""What a hand-written parameters schema may use: the check ``register_external`` runs.

``_validate`` enforces a subset of JSON schema (draft 2020-12; its module docstring lists
it). A keyword outside it that *constrains* values (``if``/``then``/``else``,
``patternProperties``, ``contains``, ``unevaluatedProperties``, ...) would be skipped
silently: the model would be told the schema, send a value it forbids, and the handler
would get it. So a spec that uses one is refused when the tool is registered, naming the
keyword, where it is and what to do; so is a ``$ref`` that does not name a part of the
schema itself (``#`` or ``#/$defs/...``: other documents and anchors are not fetched).

Annotations (``title``, ``description``, ``default``, ``examples``, ``format``, which
2020-12 makes an annotation unless a validator opts in, ``$schema``, ``$comment``, ...)
and keywords JSON schema does not define (``x-...``) constrain nothing and pass, as
JSON schema says. Older forms that do constrain (OpenAPI's ``nullable``, Draft 4's
boolean ``exclusiveMinimum``, a list of ``items`` with ``additionalItems``,
``definitions``) pass because validation checks them as their authors meant. A known
keyword whose value has the wrong type (``"minLength": "3"``) passes too: validation
ignores it, so the tool stays callable.

The walk visits only the places that hold schemas (``properties``, ``items``, ``anyOf``,
``$defs``...), never values (``default``, ``enum``, ``examples``), and is iterative, so
a deep schema cannot hit the recursion limit.
"""

from __future__ import annotations

from typing import Any

from mp13_toolbox._patterns import resolve_ref

#: Keywords that constrain values and that validation does not enforce.
UNSUPPORTED = (
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$dynamicRef",
    "$recursiveRef",
)
# Keyword -> how it holds subschemas: one schema, a list of them, or a name -> schema map.
_ONE = ("items", "additionalItems", "additionalProperties", "not")
_MANY = ("prefixItems", "items", "anyOf", "oneOf", "allOf")  # "items": Draft 4's list too
_MAP = ("properties", "$defs", "definitions")


def _join(where: str, key: str) -> str:
    return f"{where}/{key}"


def _children(schema: dict[str, Any], where: str) -> list[tuple[Any, str]]:
    out: list[tuple[Any, str]] = []
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            out.append((schema[key], _join(where, key)))
    for key in _MANY:
        subs = schema.get(key)
        if isinstance(subs, list):
            out.extend((sub, _join(where, f"{key}/{i}")) for i, sub in enumerate(subs))
    for key in _MAP:
        subs = schema.get(key)
        if isinstance(subs, dict):
            out.extend((sub, _join(where, f"{key}/{name}")) for name, sub in subs.items())
    return out


def spec_problems(schema: dict[str, Any]) -> list[str]:
    """What in ``schema`` validation would not enforce, one line per finding, each naming
    where (a JSON pointer, ``#/properties/x``); empty when everything is enforced."""
    problems: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        problems.extend(f"{key!r} at {where}" for key in UNSUPPORTED if key in node)
        ref = node.get("$ref")
        if isinstance(ref, str) and resolve_ref(schema, ref) is None:
            problems.append(
                f"'$ref': {ref!r} at {where}, which names no part of this schema (only '#' "
                "and '#/$defs/<name>' are followed: put the definition under '$defs')"
            )
        stack.extend(reversed(_children(node, where)))
    return problems
