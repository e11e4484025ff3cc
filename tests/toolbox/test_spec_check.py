# SPDX-License-Identifier: MIT
"""A hand-written schema that validation cannot enforce is refused at registration."""

from __future__ import annotations

import pytest

from mp13_toolbox import Toolbox, ToolCall, ToolRegistrationError


def _register(parameters):
    tb = Toolbox()
    tb.register_external({"name": "t", "parameters": parameters}, lambda call: "ran")
    return tb


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        (
            {"type": "object", "properties": {"a": {"if": {"minimum": 0}, "then": {}}}},
            "'if' at #/properties/a",
        ),
        (
            {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}},
            "'patternProperties' at #",
        ),
        (
            {"type": "object", "properties": {"l": {"items": {"anyOf": [{"contains": {}}]}}}},
            "'contains' at #/properties/l/items/anyOf/0",
        ),
        ({"type": "object", "unevaluatedProperties": False}, "'unevaluatedProperties' at #"),
        ({"type": "object", "dependentRequired": {"a": ["b"]}}, "'dependentRequired' at #"),
        (
            {"type": "object", "properties": {"a": {"$ref": "other.json#/a"}}},
            "'$ref': 'other.json#/a' at #/properties/a, which names no part of this schema",
        ),
        ({"type": "object", "$ref": "#/$defs/missing"}, "'$ref': '#/$defs/missing' at #"),
        ({"type": "object", "$defs": {"n": {"propertyNames": {}}}}, "'propertyNames' at #/$defs/n"),
        # Draft 4 places that hold schemas are walked too
        (
            {"type": "object", "properties": {"t": {"items": [{"contains": {}}]}}},
            "'contains' at #/properties/t/items/0",
        ),
        (
            {"type": "object", "properties": {"t": {"items": [], "additionalItems": {"if": {}}}}},
            "'if' at #/properties/t/additionalItems",
        ),
        ({"type": "object", "definitions": {"n": {"then": {}}}}, "'then' at #/definitions/n"),
    ],
)
def test_keywords_that_would_pass_unchecked_are_refused_naming_where(parameters, named):
    with pytest.raises(ToolRegistrationError) as info:
        _register(parameters)
    text = str(info.value)
    assert text.startswith("tool 't': its parameters schema uses what argument validation")
    assert named in text
    assert "Remove it and check that in the handler" in text


@pytest.mark.parametrize(
    "parameters",
    [
        # annotations, keywords JSON schema does not define, values that merely look like
        # keywords (a default, an enum member) and malformed values: nothing to enforce
        {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}},
        {"type": "object", "properties": {"a": {"nullable": True, "x-ui": {"if": 1}}}},
        {"type": "object", "properties": {"a": {"default": {"if": 1}, "enum": [{"then": 2}]}}},
        {"type": "object", "properties": {"a": {"examples": [{"contains": 1}]}}},
        {
            "type": "object",
            "$defs": {"n": {"type": "integer"}},
            "properties": {"a": {"$ref": "#/$defs/n"}},
        },
        {"type": "object", "properties": {"a": {"$ref": "#/properties/b"}, "b": {}}},
        {"type": "object", "properties": {"a": {"minLength": "3"}}},
    ],
)
def test_what_constrains_nothing_or_is_checked_registers(parameters):
    tb = _register(parameters)
    assert tb.execute(ToolCall("t", {}), tb.view([])).content == "ran"


def test_a_draft4_openapi_spec_is_enforced_as_its_author_meant():
    # Each of these registered and was then checked wrongly: a null refused for a nullable
    # argument, 0 taken where "> 0" was meant, a tuple's positions not checked at all.
    parameters = {
        "type": "object",
        "definitions": {"Pos": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
        "properties": {
            "note": {"type": "string", "nullable": True},
            "size": {"$ref": "#/definitions/Pos"},
            "pair": {
                "type": "array",
                "items": [{"type": "string"}, {"type": "integer"}],
                "additionalItems": False,
            },
        },
    }
    tb = _register(parameters)
    view = tb.view([])
    good = {"note": None, "size": 0.5, "pair": ["a", 1]}
    assert tb.execute(ToolCall("t", good), view).content == "ran"
    result = tb.execute(ToolCall("t", {"note": 1, "size": 0, "pair": [1, "a", 2]}), view)
    assert result.is_error
    for problem in (
        "argument 'note': expected string, got integer 1",
        "argument 'size': must be > 0, got 0",
        "argument 'pair[0]': expected string, got integer 1",
        "argument 'pair[1]': expected integer, got string \"a\"",
        "argument 'pair[2]': no value is accepted here; leave it out",
    ):
        assert problem in result.content


def test_a_pydantic_style_spec_with_defs_is_enforced_through_its_refs():
    parameters = {
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            }
        },
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "required": ["items"],
    }
    tb = _register(parameters)
    view = tb.view([])
    assert tb.execute(ToolCall("t", {"items": [{"sku": "a", "qty": 2}]}), view).content == "ran"
    result = tb.execute(ToolCall("t", {"items": [{"sku": "a", "qty": 0}]}), view)
    assert result.is_error and "argument 'items[0].qty': must be >= 1, got 0" in result.content
