# SPDX-License-Identifier: Apache-2.0
"""Raw-text formats convert values with schemas that use ``$ref`` and ``nullable``.

Formats whose models write argument values as raw text (``qwen3_coder``'s
``<parameter=zip>90210</parameter>``, FunctionGemma's bare ``zip:90210``) convert them
with the tool's schema. A recursive Python type is advertised as ``{"$ref":
"#/$defs/Node"}`` and Draft 4 / OpenAPI specs say ``"nullable": true``; the conversion
did not follow the one nor read the other, so under a ``$ref`` it guessed (``"90210"``
became the number ``90210``, which validation then refused: the model was told its zip
code was wrong) and a nullable string's ``null`` reached the tool as the text
``"null"``. Each case here runs end to end: the model's text is parsed, the call
validated by the toolbox and converted into the function's Python types.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mp13_engine import toolcalls
from mp13_engine.toolcalls import _raw_values
from mp13_toolbox import Toolbox, ToolCall

RAW_TEXT_FORMATS = ("qwen3_coder", "seed_oss", "glm45", "minimax_m2", "functiongemma")


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


# A recursive alias used as a parameter's type: its schema is a bare {"$ref": ...}.
Label = str | list["Label"]


def _toolbox() -> tuple[Toolbox, dict[str, Any]]:
    tb = Toolbox()
    seen: dict[str, Any] = {}

    @tb.register
    def outline(root: Node, label: Label) -> str:
        """File a tree of sections under a label."""
        seen.update(root=root, label=label)
        return "ok"

    def file_address(call: ToolCall) -> str:
        seen.update(call.arguments)
        return "ok"

    # Draft 4 / OpenAPI 3.0 style: "definitions" and "nullable"
    place = {
        "type": "object",
        "properties": {
            "zip": {"$ref": "#/definitions/Zip"},
            "near": {"anyOf": [{"$ref": "#/definitions/Place"}, {"type": "null"}]},
        },
        "required": ["zip"],
    }
    parameters = {
        "type": "object",
        "properties": {
            "zip": {"$ref": "#/definitions/Zip"},
            "note": {"type": "string", "nullable": True},
            "where": {"$ref": "#/definitions/Place"},
        },
        "required": ["zip", "note", "where"],
        "definitions": {"Zip": {"type": "string"}, "Place": place},
    }
    spec = {"name": "file_address", "description": "File an address.", "parameters": parameters}
    tb.register_external(spec, file_address)
    return tb, seen


OUTLINE = ToolCall(
    "outline",
    {
        "root": {"name": "top", "children": [{"name": "90210", "children": []}]},
        "label": "90210",
    },
)
ADDRESS = ToolCall(
    "file_address",
    {
        "zip": "90210",
        "note": None,
        "where": {"zip": "10115", "near": {"zip": "75001", "near": None}},
    },
)

# FunctionGemma's model writes what is not a string bare, and may write a string bare too:
# those are the values its schema decides (an <escape>d string is a string as written).
_GEMMA = {
    "outline": "<start_function_call>call:outline{label:90210,"
    "root:{children:[{children:[],name:90210}],name:<escape>top<escape>}}<end_function_call>",
    "file_address": "<start_function_call>call:file_address{note:null,"
    "where:{near:{near:null,zip:75001},zip:10115},zip:90210}<end_function_call>",
}


def _model_text(fmt: str, call: ToolCall) -> str:
    if fmt == "functiongemma":
        return _GEMMA[call.name]
    # the format's own renderer writes a value as its model does: strings as they are
    # (90210), anything else as JSON (null, {...})
    return toolcalls.render_calls([call], fmt)


@pytest.mark.parametrize("fmt", RAW_TEXT_FORMATS)
def test_a_recursive_tool_call_converts_validates_and_reaches_the_function(fmt):
    tb, seen = _toolbox()
    text = _model_text(fmt, OUTLINE)
    out = toolcalls.parse(text, fmt, tb.specs())
    assert out.errors == ()
    assert out.tool_calls == (OUTLINE,)
    # streamed in small pieces, the same call
    parser = toolcalls.StreamParser(fmt, tb.specs())
    for i in range(0, len(text), 7):
        parser.feed(text[i : i + 7])
    assert parser.finish().tool_calls == (OUTLINE,)
    result = tb.execute(out.tool_calls[0], tb.view())
    assert not result.is_error, result.content
    assert seen == {"root": Node("top", [Node("90210")]), "label": "90210"}


@pytest.mark.parametrize("fmt", RAW_TEXT_FORMATS)
def test_definitions_refs_and_nullable_convert_validate_and_reach_the_handler(fmt):
    tb, seen = _toolbox()
    out = toolcalls.parse(_model_text(fmt, ADDRESS), fmt, tb.specs())
    assert out.errors == ()
    assert out.tool_calls == (ADDRESS,)
    result = tb.execute(out.tool_calls[0], tb.view())
    assert not result.is_error, result.content
    assert seen == ADDRESS.arguments
    assert seen["note"] is None  # not the text "null"


_ROOT = {
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/Zip"}},
    "$defs": {
        "Zip": {"type": "string"},
        "Count": {"allOf": [{"$ref": "#/$defs/Int"}]},
        "Int": {"type": "integer"},
        "A": {"$ref": "#/$defs/B"},
        "B": {"$ref": "#/$defs/A"},
        "Self": {"anyOf": [{"$ref": "#/$defs/Self"}, {"type": "string"}]},
        "a/b": {"type": "string"},
    },
}


@pytest.mark.parametrize(
    ("raw", "schema", "value"),
    [
        ("90210", {"$ref": "#/$defs/Zip"}, "90210"),
        ("90210", {"$ref": "#/$defs/Zip", "description": "a zip code"}, "90210"),
        ("90210", {"$ref": "#/$defs/a~1b"}, "90210"),  # a JSON pointer's escapes
        ("90210", {"anyOf": [{"$ref": "#/$defs/Zip"}, {"type": "null"}]}, "90210"),
        ("null", {"anyOf": [{"$ref": "#/$defs/Zip"}, {"type": "null"}]}, None),
        ("7", {"$ref": "#/$defs/Count"}, 7),  # allOf wrapping a ref (pydantic v1's form)
        ("7", {"allOf": [{"type": ["string", "integer"]}, {"type": "string"}]}, "7"),
        ("7", {"allOf": [{"type": ["string", "integer"]}, {"type": "number"}]}, 7),
        ("90210", {"$ref": "#/$defs/Self"}, "90210"),  # refers to itself: followed once
        # a cycle with no type anywhere, a ref to nothing, to another document: guessed
        ("90210", {"$ref": "#/$defs/A"}, 90210),
        ("90210", {"$ref": "#/$defs/Missing"}, 90210),
        ("90210", {"$ref": "other.json#/Zip"}, 90210),
        ("90210", {"$ref": "#/properties/x"}, "90210"),  # a ref to a ref
        # OpenAPI 3.0 / Draft 4's nullable
        ("null", {"type": "string", "nullable": True}, None),
        ("None", {"type": "string", "nullable": True}, None),
        ("nil", {"type": "string", "nullable": True}, "nil"),
        ("null", {"type": "string", "nullable": False}, "null"),
        ("null", {"type": "string"}, "null"),
        ("null", {"$ref": "#/$defs/Zip", "nullable": True}, None),
        ("null", {"enum": ["a", "b"], "nullable": True}, None),
        ("a", {"enum": ["a", "b"], "nullable": True}, "a"),
    ],
)
def test_convert_value_follows_refs_and_nullable(raw, schema, value):
    assert _raw_values.convert_value(raw, schema, _ROOT) == value


def test_without_the_root_a_ref_is_guessed_as_before():
    assert _raw_values.convert_value("90210", {"$ref": "#/$defs/Zip"}) == 90210


def test_a_parameters_schema_that_is_itself_a_ref_is_followed():
    params = {
        "$ref": "#/$defs/Args",
        "$defs": {"Args": {"type": "object", "properties": {"zip": {"type": "string"}}}},
    }
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    text = (
        "<tool_call>\n<function=f>\n<parameter=zip>\n90210\n</parameter>\n</function>\n</tool_call>"
    )
    assert toolcalls.parse(text, "qwen3_coder", tools).tool_calls == (
        ToolCall("f", {"zip": "90210"}),
    )


@pytest.mark.parametrize("fmt", ["qwen3_coder", "functiongemma"])
def test_a_dict_parameter_converts_its_values_with_additional_properties(fmt):
    tb = Toolbox()
    seen: dict[str, Any] = {}

    @tb.register
    def tag(codes: dict[str, str]) -> str:
        """Tag codes."""
        seen.update(codes)
        return "ok"

    text = {
        "qwen3_coder": "<tool_call>\n<function=tag>\n<parameter=codes>\n"
        '{"a": "90210"}\n</parameter>\n</function>\n</tool_call>',
        "functiongemma": "<start_function_call>call:tag{codes:{a:90210}}<end_function_call>",
    }[fmt]
    out = toolcalls.parse(text, fmt, tb.specs())
    assert out.tool_calls == (ToolCall("tag", {"codes": {"a": "90210"}}),)
    assert not tb.execute(out.tool_calls[0], tb.view()).is_error
    assert seen == {"a": "90210"}


def test_a_ref_cycle_in_a_spec_never_hangs_or_raises_the_parser():
    params = {
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/A"}},
        "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}]}},
    }
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    text = "<start_function_call>call:f{n:{m:[1,{k:90210}]}}<end_function_call>"
    out = toolcalls.parse(text, "functiongemma", tools)
    assert out.errors == ()
    assert out.tool_calls == (ToolCall("f", {"n": {"m": [1, {"k": 90210}]}}),)
