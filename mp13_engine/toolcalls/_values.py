# SPDX-License-Identifier: Apache-2.0
"""Payload decoding shared by the formats: JSON calls, Python-literal calls, literal values.

Every decoder here either returns complete ``ToolCall`` values or raises
``PayloadError`` with a short reason; the stream machine turns that into "no
call, raw text kept in content, error recorded". Nothing here evaluates code:
Python-literal payloads are read with ``ast`` and a whitelist of literal nodes.
Arguments are always a JSON object (``dict``); names are always bare (no
``functions.`` prefix, no ``:N`` suffix). Reading a tool's parameters schema is
``_schemas``'; converting raw-text values by it is ``_raw_values``'.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._schemas import parameter_names
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


# --- the tools a parser is given ------------------------------------------------------------


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


# --- literal values ---------------------------------------------------------------------------

# Python and JSON spellings of the literal words a model may write.
_PY_WORDS = MappingProxyType(
    {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
)


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
        order = list(parameter_names(schemas, name))
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
