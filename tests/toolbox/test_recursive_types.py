# SPDX-License-Identifier: MIT
"""Tools whose parameter types contain themselves: ``$defs`` + ``$ref`` schemas,
validation of deep calls against them, and conversion into the declared classes.

Such a type (``Node`` with ``children: list[Node]``) was refused at registration
("type nesting is deeper than 8 levels (recursive type?)"), so a tool over a tree had
to be registered with a hand-written spec and take plain dicts.
"""

from __future__ import annotations

import dataclasses
from typing import TypedDict

import attrs
import pytest

from mp13_toolbox import Toolbox, ToolCall, ToolRegistrationError, function_spec, validate


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


@attrs.define
class Expr:
    op: str
    args: list[Expr | int] = attrs.Factory(list)


class Folder(TypedDict, total=False):  # total=False: NotRequired is 3.11+
    name: str
    sub: list[Folder]


@dataclasses.dataclass
class Even:  # Even and Odd contain each other: one def covers both
    odd: Odd | None = None


@dataclasses.dataclass
class Odd:
    even: Even | None = None


@dataclasses.dataclass
class Leaf:  # not recursive: stays inline, exactly as before
    value: int


# Recursive aliases: they name themselves as strings, which only this module resolves.
JSON = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
Nest = Leaf | list["Nest"]


@dataclasses.dataclass
class Doc:  # a recursive alias in a class's field: refused, saying what to do instead
    title: str
    body: JSON = None


_NODE_DEF = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
    },
    "additionalProperties": False,
    "required": ["name"],
}


def test_a_recursive_type_is_defined_once_and_referred_to():
    def walk(root: Node, spare: Node | None = None, leaf: Leaf | None = None) -> None: ...

    p = function_spec(walk)[0].parameters
    assert p["properties"]["root"] == {"$ref": "#/$defs/Node"}
    assert p["properties"]["spare"] == {
        "anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}],
        "default": None,
    }
    # only the recursive type goes under $defs; the other is inlined as it always was
    assert p["properties"]["leaf"]["anyOf"][0] == {
        "type": "object",
        "properties": {"value": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["value"],
    }
    assert p["$defs"] == {"Node": _NODE_DEF}


def test_mutual_recursion_and_typeddict_and_attrs():
    def f(e: Even, folder: Folder, expr: Expr) -> None: ...

    p = function_spec(f)[0].parameters
    assert set(p["$defs"]) == {"Even", "Folder", "Expr"}
    odd = p["$defs"]["Even"]["properties"]["odd"]["anyOf"][0]
    assert odd["properties"]["even"]["anyOf"][0] == {"$ref": "#/$defs/Even"}
    assert p["$defs"]["Folder"]["properties"]["sub"]["items"] == {"$ref": "#/$defs/Folder"}
    assert p["$defs"]["Expr"]["properties"]["args"]["items"]["anyOf"][0] == {"$ref": "#/$defs/Expr"}


def test_non_recursive_schemas_get_no_defs():
    def f(leaf: Leaf, xs: list[Leaf]) -> None: ...

    assert "$defs" not in function_spec(f)[0].parameters


def test_the_schema_agrees_with_the_reference_validator():
    jsonschema = pytest.importorskip("jsonschema")

    def walk(root: Node) -> None: ...

    schema = function_spec(walk)[0].parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    deep = {"root": {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}}
    bad = {"root": {"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]}}
    for value in (deep, bad):
        expected = jsonschema.Draft202012Validator(schema).is_valid(value)
        assert (validate(schema, value)[1] == []) is expected


def _walker() -> tuple[Toolbox, dict[str, object]]:
    tb = Toolbox()
    seen: dict[str, object] = {}

    @tb.register
    def walk(root: Node, expr: Expr | None = None, folder: Folder | None = None) -> str:
        """Walk a tree."""
        seen.update(root=root, expr=expr, folder=folder)
        return "ok"

    return tb, seen


def test_a_deep_call_is_converted_into_the_declared_classes():
    tb, seen = _walker()
    args = {
        "root": {"name": "r", "children": [{"name": "x", "children": [{"name": "y"}]}]},
        "expr": {"op": "+", "args": [1, {"op": "*", "args": [2, 3.0]}]},
        "folder": {"name": "/", "sub": [{"name": "usr", "sub": [{"name": "bin"}]}]},
    }
    result = tb.execute(ToolCall("walk", args))
    assert (result.is_error, result.content) == (False, "ok")
    assert seen["root"] == Node("r", [Node("x", [Node("y")])])
    assert isinstance(seen["root"].children[0].children[0], Node)  # type: ignore[attr-defined]
    assert seen["expr"] == Expr("+", [1, Expr("*", [2, 3])])
    inner = seen["expr"].args[1].args[1]  # type: ignore[attr-defined]
    assert type(inner) is int  # 3.0 became the integer the annotation declares
    assert seen["folder"] == {"name": "/", "sub": [{"name": "usr", "sub": [{"name": "bin"}]}]}


def test_a_bad_value_deep_down_is_refused_with_its_path():
    tb, seen = _walker()
    bad = {"name": "r", "children": [{"name": "x", "children": [{"name": 5}, {"nam": "z"}]}]}
    result = tb.execute(ToolCall("walk", {"root": bad}))
    assert result.is_error and not seen
    assert "argument 'root.children[0].children[0].name': expected string, got integer 5" in (
        result.content
    )
    assert "argument 'root.children[0].children[1].name' is required (string)" in result.content
    assert "argument 'root.children[0].children[1].nam' is not accepted" in result.content


def test_a_recursive_alias_is_defined_once_and_its_values_converted():
    tb = Toolbox()
    seen: dict[str, object] = {}

    @tb.register
    def store(doc: JSON, nest: Nest, many: list[JSON] | None = None) -> str:
        seen.update(doc=doc, nest=nest, many=many)
        return "ok"

    p = tb.get("store").spec.parameters
    assert p["properties"]["doc"] == {"$ref": "#/$defs/JSON"}
    assert p["properties"]["nest"] == {"$ref": "#/$defs/Nest"}
    assert p["properties"]["many"]["items"] == {"$ref": "#/$defs/JSON"}
    assert p["$defs"]["Nest"] == {
        "anyOf": [
            {
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "additionalProperties": False,
                "required": ["value"],
            },
            {"type": "array", "items": {"$ref": "#/$defs/Nest"}},
        ]
    }
    doc = {"a": [1, {"b": None}, 2.5, "s", True]}
    args = {"doc": doc, "nest": [{"value": 1}, [{"value": 2.0}, []]], "many": [1, "x"]}
    result = tb.execute(ToolCall("store", args))
    assert (result.is_error, result.content) == (False, "ok")
    assert seen == {"doc": doc, "nest": [Leaf(1), [Leaf(2), []]], "many": [1, "x"]}
    bad = tb.execute(ToolCall("store", {"doc": {}, "nest": [[{"value": "x"}]]}))
    assert bad.is_error
    assert "argument 'nest[0][0].value': expected integer, got string \"x\"" in bad.content


def test_a_recursive_alias_in_a_class_field_is_refused_saying_what_to_do():
    def put(d: Doc) -> None: ...

    with pytest.raises(ToolRegistrationError) as err:
        function_spec(put)
    assert str(err.value).startswith(
        "tool 'put', parameter 'd'.body{}: the recursive alias 'JSON' is supported as a "
        "parameter's type (or inside one), not in a class's field;"
    )
