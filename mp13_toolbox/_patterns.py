# SPDX-License-Identifier: MIT
"""The two parts of a JSON schema written in a language other than JSON, read for Python.

A ``pattern`` is an ECMA-262 regular expression (JSON schema says so), and Python's
``regex`` reads a few things in it differently (``$``, ``\\d``, ``\\w``):
``ecma_pattern`` rewrites those and copies the rest. A ``$ref`` is a URI whose
fragment is a JSON pointer (RFC 6901) into the schema: ``resolve_ref`` follows a
local one (``#``, ``#/$defs/Node``) to the subschema it names. It is the one resolver of
mp13: validation, the registration check and the engine's tool-call parsers (which convert
raw-text values by the schema validation then checks) all follow a ``$ref`` through it,
which is why the toolbox exports it.

Invariants: both are pure functions of their input. ``ecma_pattern`` does not
judge a pattern (one that does not compile stays one, for the caller to ignore);
``resolve_ref`` answers None for a reference that names nothing here, and
fetches nothing (another document, an anchor).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

# ECMA-262 classes, which JSON schema's patterns use, in Python syntax: ASCII only.
_ECMA_OUTSIDE = {"d": "[0-9]", "D": "[^0-9]", "w": "[A-Za-z0-9_]", "W": "[^A-Za-z0-9_]"}
_ECMA_INSIDE = {"d": "0-9", "w": "A-Za-z0-9_"}


def ecma_pattern(pattern: str) -> str:
    r"""``pattern`` (ECMA-262, as JSON schema says) in the syntax of Python's ``regex``,
    where two things differ: ``$`` also matches before a final newline (so ``^[a-z]+$``
    took ``"abc\n"``), and ``\d``/``\w`` take any script's digits and letters (``"١٢٣"``
    for ``^\d+$``). ``$`` becomes ``\Z`` and the classes their ASCII sets (``\D``/``\W``
    inside ``[...]`` stay as they are). Escapes and ``[...]`` are copied through."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            table = _ECMA_INSIDE if in_class else _ECMA_OUTSIDE
            out.append(table.get(nxt, ch + nxt))
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            # a "]" first in a class (after an optional "^") is a literal one
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            if pattern[j : j + 1] == "]":
                out.append(pattern[i : j + 1])
                i = j + 1
                continue
        elif ch == "$":
            ch = "\\Z"
        out.append(ch)
        i += 1
    return "".join(out)


def resolve_ref(root: Any, ref: str) -> Any:
    """The subschema of ``root`` that a local ``$ref`` names: ``#`` (the whole schema) or a
    JSON pointer (``#/$defs/Node``, ``~0``/``~1`` and %-escapes decoded); None when it
    names nothing (or is not local: ``other.json#...``, an anchor ``#node``).

    ``resolve_ref({"$defs": {"Node": {"type": "object"}}}, "#/$defs/Node")`` is
    ``{"type": "object"}``. It never raises and fetches nothing; a caller that follows
    refs recursively guards against cycles itself (``{"$ref": "#"}``)."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
