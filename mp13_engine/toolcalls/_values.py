# SPDX-License-Identifier: Apache-2.0
"""Payload decoding shared by the formats: JSON calls, Python-literal calls, schema conversion.

Every decoder here either returns complete ``ToolCall`` values or raises
``PayloadError`` with a short reason; the stream machine turns that into "no
call, raw text kept in content, error recorded". Nothing here evaluates code:
Python-literal payloads are read with ``ast`` and a whitelist of literal nodes.
Arguments are always a JSON object (``dict``); names are always bare (no
``functions.`` prefix, no ``:N`` suffix). Raw-text values are converted with the
tool's schema as validation reads it: local ``$ref``s resolved against the tool's
parameters schema (a ref cycle is followed once), ``"nullable": true`` as ``null``.
"""

from __future__ import annotations

import ast
import json
import math
import re
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._types import require_list, require_text
from mp13_toolbox import ToolCall, ToolSpec

#: A tool as the parsers take it: an OpenAI-style spec dict (or bare function dict), or a
#: ``mp13_toolbox.ToolSpec``.
ToolLike = Mapping[str, Any] | ToolSpec


class PayloadError(ToolFormatError):
    """A tool-call payload is malformed; the message says how.

    Raised by decoders (built-in or a registered format's) and caught by the
    stream machine, which records it as a parse error: it never escapes ``parse``.
    """


_INDEX_SUFFIX = re.compile(r":\d+$")

#: The file name Python-literal payloads are parsed under. A model's text is not source
#: code the user wrote: Python's warnings about it (``'\A'`` in a Windows path is an
#: invalid escape sequence: a DeprecationWarning on 3.11, a SyntaxWarning shown by default
#: from 3.12) would be printed on the user's console at every such call. This one filter,
#: for this file name only, keeps them out; it is added once, whatever the other filters.
_MODEL_TEXT = "<model tool call>"
for _category in (DeprecationWarning, SyntaxWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape(_MODEL_TEXT))


def bare_name(name: str) -> str:
    """Strip the ``functions.`` namespace and a ``:N`` index suffix from a tool name."""
    name = name.strip()
    name = _INDEX_SUFFIX.sub("", name)
    if name.startswith("functions."):
        name = name[len("functions.") :]
    return name


def _number(text: str) -> float | str:
    """A JSON number a model wrote, or its text where no float holds it (``1e999``)."""
    value = float(text)
    return value if math.isfinite(value) else text


def _json(text: str) -> Any:
    """``json.loads`` keeping what JSON lacks as the model wrote it: ``NaN``,
    ``Infinity`` (which Python's parser takes) and numbers past a float's range come back
    as strings, so the call's arguments stay JSON (a conversation's export), and argument
    validation tells the model that a string is not the number it wanted."""
    return json.loads(text, parse_constant=str, parse_float=_number)


def loads(text: str) -> Any:
    """``json.loads`` that raises ``PayloadError`` (with the position) instead."""
    try:
        return _json(text)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"invalid JSON ({exc})") from exc


def arguments_object(value: Any) -> dict[str, Any]:
    """Normalise an ``arguments`` value: dict as is, JSON string decoded, missing -> ``{}``."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        value = loads(value)
    if not isinstance(value, dict):
        raise PayloadError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def json_arguments(text: str) -> dict[str, Any]:
    """A call's arguments written as JSON text (blank: none), as an object."""
    return arguments_object(loads(text) if text.strip() else None)


def call_from_obj(
    obj: Any,
    *,
    args_keys: tuple[str, ...] = ("arguments", "parameters"),
    require_args: bool = False,
    name_keys: tuple[str, ...] = ("name",),
) -> ToolCall:
    """A ``{"name": ..., "arguments": ...}`` object (OpenAI nesting accepted) as a ``ToolCall``.

    ``require_args``: the arguments key must be present (formats without a call
    marker, where a bare ``{"name": ...}`` may just be JSON in the prose).
    ``name_keys`` / ``args_keys``: the keys a format uses, tried in order.
    """
    if not isinstance(obj, dict):
        raise PayloadError(f"a tool call must be a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):
        inner = dict(obj["function"])
        inner.setdefault("id", obj.get("id"))
        obj = inner
    name = next((obj[k] for k in name_keys if k in obj), None)
    if not isinstance(name, str) or not bare_name(name):
        raise PayloadError(f"a tool call needs a non-empty string {name_keys[0]!r}")
    if require_args and not any(k in obj for k in args_keys):
        raise PayloadError(f"a call needs one of {', '.join(args_keys)}")
    args = next((obj[k] for k in args_keys if k in obj), None)
    call_id = obj.get("id")
    return ToolCall(
        name=bare_name(name),
        arguments=arguments_object(args),
        id=str(call_id) if isinstance(call_id, (str, int)) and str(call_id) else None,
    )


def calls_from_json(
    text: str,
    *,
    args_keys: tuple[str, ...] = ("arguments", "parameters"),
    require_args: bool = False,
    name_keys: tuple[str, ...] = ("name",),
) -> list[ToolCall]:
    """One JSON object or a JSON array of objects, as a list of ``ToolCall``.

    The decoder most JSON formats need (public, for formats users add): names
    are made bare, arguments given as JSON text are decoded, and anything
    malformed raises ``PayloadError``.
    """
    require_text(text, "the JSON text calls_from_json reads")
    value = loads(text)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise PayloadError("empty list of tool calls")
    return [
        call_from_obj(i, args_keys=args_keys, require_args=require_args, name_keys=name_keys)
        for i in items
    ]


def decode_json_calls(payload: str, ctx: Any) -> list[ToolCall]:
    """Decoder for payloads that are one call object or a list of them (most JSON formats)."""
    return calls_from_json(payload.strip())


def json_each(
    before: str = "",
    after: str = "",
    sep: str = "\n",
    key: str = "arguments",
    *,
    ids: bool = False,
) -> Callable[[Iterable[ToolCall]], str]:
    """The renderer of formats that write each call as one ``{"name": ..., key: {...}}``
    object between ``before`` and ``after``, the calls joined by ``sep``; with ``ids``,
    a call's id (when it has one) follows as ``"id"``."""

    def item(c: ToolCall) -> dict[str, Any]:
        out = {"name": c.name, key: c.arguments}
        if ids and c.id is not None:
            out["id"] = c.id
        return out

    return lambda calls: sep.join(before + dumps(item(c)) + after for c in calls)


def json_list(
    before: str = "", after: str = "", *, ids: bool = False
) -> Callable[[Iterable[ToolCall]], str]:
    """The renderer of formats that write the calls as one JSON list,
    ``[{"name": ..., "arguments": {...}}, ...]``, between ``before`` and ``after``
    (``ids`` as in ``json_each``)."""
    items = json_each(sep=", ", ids=ids)
    return lambda calls: f"{before}[{items(calls)}]{after}"


# --- schema-based conversion of raw-text parameter values -------------------------------------


def tool_list(tools: object) -> list[ToolLike]:
    """``tools`` as a list (``None``: no tools); ``ToolFormatError`` if it is not a list of
    specs."""
    if tools is None:
        return []
    what = "tools is a list of tool specs (OpenAI-style dicts or ToolSpec)"
    return require_list(tools, (Mapping, ToolSpec), what)


def tool_schemas(tools: Iterable[ToolLike] | None) -> dict[str, dict[str, Any]]:
    """Map tool name -> JSON-schema ``parameters`` from OpenAI-style specs (or ``ToolSpec``)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tool_list(tools):
        spec = tool.to_openai() if isinstance(tool, ToolSpec) else tool
        fn = spec.get("function", spec)
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = dict(params) if isinstance(params, Mapping) else {}
    return out


def _properties(schemas: Mapping[str, Mapping[str, Any]], tool: str) -> Mapping[str, Any]:
    """``tool``'s parameter schemas by name, in schema order (empty when unknown)."""
    root = schemas.get(tool)
    props = (shape_schema(root, "object", root) or {}).get("properties")
    return props if isinstance(props, Mapping) else {}


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


# Python and JSON spellings of the literal words a model may write.
_PY_WORDS = MappingProxyType(
    {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
)


# --- local $ref resolution: tool specs name recursive types as {"$ref": "#/$defs/Node"} ---
#
# A ref resolves against the tool's whole parameters schema (``root``), as the toolbox's
# validation resolves it, so what a value is converted to is what validation then checks.
# Only local refs are followed (``#``, ``#/$defs/X``, Draft 4's ``#/definitions/X``, any
# JSON pointer into the schema); another document or an anchor names nothing here. Each
# walk carries the refs it is inside (``seen``), so a ref cycle (``A -> B -> A``, or
# ``{"$ref": "#"}`` inside the root) is followed once and ends: a spec never makes a
# parser loop or raise.


def _resolve_ref(root: Any, ref: str) -> Any:
    """The part of ``root`` a local ``$ref`` names (``#`` or a JSON pointer, ``~0``/``~1``
    and %-escapes decoded), or None when it names nothing here."""
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
        found = shape_schema(_resolve_ref(root, ref), kind, root, seen | {ref})
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


def _schema_types(schema: Any, root: Any = None, seen: frozenset[str] = frozenset()) -> list[str]:
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
            types.extend(_schema_types(_resolve_ref(root, ref), root, seen | {ref}))
        for key in ("anyOf", "oneOf"):
            for sub in _options(schema, key):
                types.extend(_schema_types(sub, root, seen))
        # allOf: every member holds, so only the types each typed member allows
        typed = [t for t in (_schema_types(s, root, seen) for s in _options(schema, "allOf")) if t]
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
    types = _schema_types(schema, root)
    if not types:
        return guess_value(raw)
    for kind in sorted(types, key=lambda k: k == "string"):
        try:
            return _as_type(raw, kind)
        except (ValueError, PayloadError):
            continue
    return guess_value(raw)


def guess_value(raw: str) -> Any:
    """Best-effort JSON value of a raw text: numbers, booleans, null, objects, arrays.

    Quoted strings are kept as written (a model may quote on purpose); anything
    that is not a literal stays a string.
    """
    text = raw.strip()
    if not text:
        return raw
    if text in _PY_WORDS:
        return _PY_WORDS[text]
    if text[0] in "-0123456789[{":
        try:
            value = _json(text)
        except (ValueError, RecursionError):
            if text[0] not in "[{":
                return raw
            try:
                value = literal_value(parse_python(text))
            except (SyntaxError, ValueError, PayloadError, RecursionError, MemoryError):
                return raw
        if isinstance(value, str):  # a bare NaN, Infinity or 1e999: the text as written
            return raw
        return value
    return raw


# --- Python-literal calls (pythonic formats, gemma tool_code) ---------------------------------


def literal_value(node: ast.AST) -> Any:
    """A JSON value from a whitelisted literal AST node; raises ``PayloadError`` otherwise."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, int, float, bool)) or node.value is None:
            return node.value
        raise PayloadError(f"unsupported literal {node.value!r}")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_value(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise PayloadError("'**' is not allowed in a tool call")
            k = literal_value(key)
            out[k if isinstance(k, str) else json.dumps(k)] = literal_value(value)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = literal_value(node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PayloadError("a sign applies to numbers only")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in _PY_WORDS:
        return _PY_WORDS[node.id]
    raise PayloadError(f"not a literal: {type(node).__name__}")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise PayloadError("a call must name a function")


def python_call(node: ast.AST, schemas: Mapping[str, Mapping[str, Any]]) -> ToolCall:
    """One ``f(a=1, ...)`` AST call as a ``ToolCall``; positional args mapped by schema order."""
    if not isinstance(node, ast.Call):
        raise PayloadError("expected a function call")
    name = bare_name(_dotted(node.func))
    args: dict[str, Any] = {}
    if node.args:
        order = list(_properties(schemas, name))
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                raise PayloadError("'*' is not allowed in a tool call")
            key = order[i] if i < len(order) else f"arg{i}"
            args[key] = literal_value(arg)
    for kw in node.keywords:
        if kw.arg is None:
            raise PayloadError("'**' is not allowed in a tool call")
        args[kw.arg] = literal_value(kw.value)
    return ToolCall(name=name, arguments=args)


def parse_python(src: str) -> ast.AST:
    """``ast.parse(src, mode="eval").body`` raising ``PayloadError`` on any failure."""
    tree = _parse(src, "eval", "a Python expression")
    assert isinstance(tree, ast.Expression)
    return tree.body


def parse_module(src: str) -> ast.Module:
    """``ast.parse(src)`` (statements) raising ``PayloadError`` on any failure."""
    tree = _parse(src, "exec", "Python code")
    assert isinstance(tree, ast.Module)
    return tree


def _parse(src: str, mode: str, what: str) -> ast.AST:
    """``src``, a model's text, parsed under ``_MODEL_TEXT``, so Python prints no warning
    about it; any failure is a ``PayloadError``."""
    try:
        return ast.parse(src.strip(), filename=_MODEL_TEXT, mode=mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PayloadError(f"not {what} ({exc.__class__.__name__})") from exc


def decode_python_list(payload: str, ctx: Any) -> list[ToolCall]:
    """Decoder for ``[f(a=1), g()]`` (or a single call) payloads, the pythonic formats'."""
    node = parse_python(payload)
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    return [python_call(item, ctx.schemas) for item in items]


def py_call(call: ToolCall) -> str:
    """A call written as Python source, ``name(key=literal, ...)``."""
    args = ", ".join(f"{k}={py_repr(v)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def py_repr(value: Any) -> str:
    """A JSON value written as a Python literal (for rendering pythonic calls)."""
    if value is True:
        return "True"
    if value is False:
        return "False"
    if value is None:
        return "None"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_repr(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {py_repr(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def dumps(value: Any) -> str:
    """Compact-ish JSON as models write it (``", "`` and ``": "`` separators, unicode kept)."""
    return json.dumps(value, ensure_ascii=False)
