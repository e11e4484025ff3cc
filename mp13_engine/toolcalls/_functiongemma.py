# SPDX-License-Identifier: Apache-2.0
"""``functiongemma``: Google's FunctionGemma, ``<start_function_call>call:NAME{...}``.

::

    <start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>

Its own markup, not JSON: keys are bare, every string is wrapped in the
``<escape>`` token (so a string may hold ``{``, ``,``, quotes or even
``<end_function_call>``), and other values are written bare (``3``, ``true``,
``{k:v}``, ``[a,b]``). A bare value is converted with the tool's schema when
known (so ``zip:007`` stays a string where the schema says so), nested ones too, through
``$ref``s (a recursive ``Node``'s children) and unions. The template
declares tools as ``<start_function_declaration>declaration:...`` and writes
results back as ``<start_function_response>response:NAME{...}``, which is why
the model stops on ``<start_function_response>`` after a call: it is a stop
marker here. As in the reference parsers, a complete call whose
``<end_function_call>`` was cut is accepted. Keys are rendered sorted, as the
template writes them. vLLM's FunctionGemma template escapes every past value
as a string; with it, past calls go back in the content, in this syntax.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
)
from mp13_engine.toolcalls._raw_values import convert_value
from mp13_engine.toolcalls._schemas import property_schema, shape_schema
from mp13_engine.toolcalls._values import PayloadError, bare_name, guess_value
from mp13_toolbox import ToolCall

ESC = "<escape>"
_HEAD = re.compile(r"\s*(?:call:)?\s*([^{\s]+)\s*(?=\{)")
_BARE_END = re.compile(r"[,}\]]")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _read(text: str, i: int, schema: Any, root: Any) -> tuple[Any, int]:
    """One value starting at ``i`` (after whitespace); returns it and the index after it.
    ``schema``: the value's (None: unknown); ``root``: the tool's parameters schema, which
    its ``$ref``s name."""
    i = _skip(text, i)
    if text.startswith(ESC, i):
        end = text.find(ESC, i + len(ESC))
        if end < 0:
            raise PayloadError("a string is missing its closing <escape>")
        raw = text[i + len(ESC) : end]
        return (raw if schema is None else convert_value(raw, schema, root)), end + len(ESC)
    if i >= len(text):
        raise PayloadError("a value is missing")
    if text[i] == "{":
        return _read_object(text, i, schema, root)
    if text[i] == "[":
        items, i = [], _skip(text, i + 1)
        array = shape_schema(schema, "array", root)
        item_schema = array.get("items") if array is not None else None
        while not text.startswith("]", i):
            value, i = _read(text, i, item_schema, root)
            items.append(value)
            i = _skip(text, i)
            if text.startswith(",", i):
                i += 1
            elif not text.startswith("]", i):
                raise PayloadError("expected ',' or ']' in a list")
        return items, i + 1
    if text[i] == '"':  # a JSON string where <escape> belonged: read it as JSON does
        try:
            value, end = json.JSONDecoder().raw_decode(text, i)
        except ValueError as exc:
            raise PayloadError(f"bad quoted string ({exc})") from exc
        return value, end
    m = _BARE_END.search(text, i)
    end = m.start() if m else len(text)
    raw = text[i:end].strip()
    if not raw:
        raise PayloadError("a value is missing")
    return (guess_value(raw) if schema is None else convert_value(raw, schema, root)), end


def _read_object(text: str, i: int, schema: Any, root: Any) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    # under a $ref (a recursive Node) or a union (Node | None): the object schema it names
    params = shape_schema(schema, "object", root)
    while not text.startswith("}", i):
        colon = text.find(":", i)
        if colon < 0:
            raise PayloadError("expected 'key:value'")
        key = text[i:colon].strip().strip("\"'")
        if not key or any(ch in key for ch in "{}[],"):
            raise PayloadError(f"bad key {text[i:colon]!r}")
        out[key], i = _read(text, colon + 1, property_schema(params, key), root)
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif not text.startswith("}", i):
            raise PayloadError("expected ',' or '}' after a value")
    return out, i + 1


def _decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    m = _HEAD.match(payload)
    if m is None:
        raise PayloadError("expected call:NAME{...}")
    name = bare_name(m.group(1))
    root = ctx.schemas.get(name)
    args, end = _read_object(payload, m.end(), root, root)
    if payload[end:].strip():
        raise PayloadError("unexpected text after the call's arguments")
    return [ToolCall(name=name, arguments=args)]


def write_value(value: Any) -> str:
    """A JSON value in FunctionGemma's markup (strings escaped, keys bare and sorted)."""
    if isinstance(value, str):
        return f"{ESC}{value}{ESC}"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{write_value(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(write_value(v) for v in value) + "]"
    return json.dumps(value)


def _render(calls: Sequence[ToolCall]) -> str:
    return "".join(
        f"<start_function_call>call:{c.name}{write_value(c.arguments)}<end_function_call>"
        for c in calls
    )


PROFILE = Profile(
    name="functiongemma",
    openers=(
        Opener(
            "<start_function_call>",
            ends=("<end_function_call>",),
            verbatim=((ESC, ESC),),
        ),
    ),
    decode=_decode,
    render=_render,
    stops=(*COMMON_STOPS, "<start_function_response>"),
    lenient_eof=True,
    detect=(r"<start_function_call>", r"<start_function_declaration>"),
    # vLLM's FunctionGemma template writes every past value as <escape>{{ value }}<escape>
    # (a number becomes a string, a dict Python text): there, calls go back in the content.
    variants=((r"<escape>\{\{-?\s*value\s*-?\}\}<escape>", MessageStyle(calls_in_content=True)),),
)
