# SPDX-License-Identifier: MIT
"""JSON schema from signatures and Google-style docstrings."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import typing
from typing import Annotated, Any, Literal, Optional, TypedDict, TypeVar

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_toolbox import (
    Toolbox,
    ToolCall,
    ToolContext,
    ToolRegistrationError,
    ToolSpec,
    function_spec,
    parse_docstring,
)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@attrs.define
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Box:
    corner: Point
    label: str = "box"
    tags: list[str] = dataclasses.field(default_factory=list)


class Person(TypedDict):
    name: str
    age: int


def params(func):
    return function_spec(func)[0].parameters


def test_description_and_arg_docs_come_from_the_docstring():
    def search(query: str, limit: int = 10) -> list[str]:
        """Search the notes.

        Longer explanation that spans
        two lines.

        Args:
            query: What to look for. It may span
                several lines.
            limit (int): At most this many hits.

        Returns:
            The hits.
        """
        return []

    spec, _ = function_spec(search)
    assert spec.name == "search"
    assert spec.description.startswith("Search the notes.")
    assert "two lines." in spec.description
    assert "Returns" not in spec.description
    props = spec.parameters["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "What to look for. It may span several lines.",
    }
    assert props["limit"] == {
        "type": "integer",
        "description": "At most this many hits.",
        "default": 10,
    }
    assert spec.parameters["required"] == ["query"]
    assert spec.parameters["additionalProperties"] is False


def test_scalars_optional_literal_enum():
    def f(
        a: str,
        b: bool,
        c: float,
        d: Optional[int] = None,  # noqa: UP045 - the old spelling must work too
        e: int | None = None,
        f: Literal["x", "y"] = "x",
        g: Color = Color.RED,
        h: Any = None,
    ) -> None: ...

    p = params(f)["properties"]
    assert p["a"] == {"type": "string"}
    assert p["b"] == {"type": "boolean"}
    assert p["c"] == {"type": "number"}
    assert p["d"]["type"] == ["integer", "null"] and p["d"]["default"] is None
    assert p["e"]["type"] == ["integer", "null"]
    assert p["f"] == {"type": "string", "enum": ["x", "y"], "default": "x"}
    assert p["g"] == {"type": "string", "enum": ["red", "green"], "default": "red"}
    assert p["h"] == {"default": None}


def test_containers():
    def f(
        a: list[int],
        b: dict[str, float],
        c: tuple[int, ...],
        d: tuple[str, int],
        e: set[str],
        f: list[list[str]],
    ) -> None: ...

    p = params(f)["properties"]
    assert p["a"] == {"type": "array", "items": {"type": "integer"}}
    assert p["b"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert p["c"] == {"type": "array", "items": {"type": "integer"}}
    assert p["d"]["prefixItems"] == [{"type": "string"}, {"type": "integer"}]
    assert p["d"]["minItems"] == p["d"]["maxItems"] == 2
    assert p["e"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert p["f"]["items"] == {"type": "array", "items": {"type": "string"}}


def test_nested_records():
    def f(box: Box, who: Person) -> None: ...

    p = params(f)["properties"]
    box = p["box"]
    assert box["type"] == "object" and box["required"] == ["corner"]
    assert box["properties"]["corner"]["properties"]["y"] == {"type": "number", "default": 0.0}
    assert box["properties"]["label"]["default"] == "box"
    assert "default" not in box["properties"]["tags"]  # factories are not recorded
    assert p["who"]["required"] == ["name", "age"]


def test_annotated_description_wins_and_context_is_hidden():
    def f(ctx: ToolContext, n: Annotated[int, "How many."]) -> None:
        """Do it.

        Args:
            n: Docstring text that loses.
        """

    spec, sig = function_spec(f)
    assert list(spec.parameters["properties"]) == ["n"]
    assert spec.parameters["properties"]["n"]["description"] == "How many."
    assert sig.context_param == "ctx"


def test_kwargs_allow_extra_arguments():
    def f(a: int, **rest: Any) -> None: ...

    assert "additionalProperties" not in params(f)


@pytest.mark.parametrize(
    ("func", "words"),
    [
        (lambda x: x, "name=..."),
        (lambda: None, "name=..."),
    ],
)
def test_lambdas_need_a_name(func, words):
    with pytest.raises(ToolRegistrationError, match="name"):
        function_spec(func)
    assert function_spec(func, name="ok")[0].name == "ok"


class Opaque:
    pass


def test_unsupported_annotations_say_what_to_do():
    def f(x: Opaque) -> None: ...

    with pytest.raises(ToolRegistrationError, match=r"parameter 'x'.*register_external"):
        function_spec(f)

    def g(*items: int) -> None: ...

    with pytest.raises(ToolRegistrationError, match="list parameter"):
        function_spec(g)

    def h(m: dict[int, str]) -> None: ...

    with pytest.raises(ToolRegistrationError, match=r"dict\[str"):
        function_spec(h)


@dataclasses.dataclass
class Tree:
    label: str
    child: Tree | None = None


@attrs.define
class Counted:
    n: int
    seen: int = attrs.field(init=False, default=0)


@dataclasses.dataclass
class Tally:
    n: int
    seen: int = dataclasses.field(init=False, default=0)


def test_bare_containers_nullable_literals_and_fields_set_by_the_class():
    def f(
        mode: Literal["x", "y"] | None = None,
        xs: list = [],  # noqa: B006 - a default the schema records
        opts: dict = {},  # noqa: B006
        a: Counted | None = None,
        b: Tally | None = None,
    ) -> None: ...

    p = params(f)["properties"]
    assert p["mode"] == {"type": ["string", "null"], "enum": ["x", "y", None], "default": None}
    assert p["xs"] == {"type": "array", "default": []}
    assert p["opts"] == {"type": "object", "default": {}}
    # A field the class sets itself (init=False) is no argument.
    for name in ("a", "b"):
        record = p[name]["anyOf"][0]
        assert record["properties"] == {"n": {"type": "integer"}}
        assert record["required"] == ["n"]


def test_types_that_cannot_become_a_schema_say_what_to_do():
    def deep(t: list[list[list[list[list[list[list[list[list[list[int]]]]]]]]]]) -> None: ...

    with pytest.raises(ToolRegistrationError) as err:
        function_spec(deep)
    assert "parameter 't'[][][][][][][][]" in str(err.value)
    assert "type nesting is deeper than 8 levels; flatten it" in str(err.value)

    # a recursive class is no longer refused as "deeper than 8 levels (recursive type?)"
    def recursive(t: Tree) -> None: ...

    assert function_spec(recursive)[0].parameters["properties"]["t"] == {"$ref": "#/$defs/Tree"}

    Unresolved = dataclasses.make_dataclass("Unresolved", [("x", "NotDefinedAnywhere")])

    def forward(u: object) -> None: ...

    forward.__annotations__["u"] = Unresolved
    with pytest.raises(ToolRegistrationError) as err:
        function_spec(forward)
    assert str(err.value) == (
        "tool 'forward', parameter 'u': cannot resolve the annotations of Unresolved: "
        "name 'NotDefinedAnywhere' is not defined; define the types it refers to at module level"
    )

    def hinted(x: int) -> None: ...

    hinted.__annotations__["x"] = "NotImportable"
    with pytest.raises(ToolRegistrationError) as err:
        function_spec(hinted)
    assert str(err.value).startswith("cannot resolve the type hints of 'hinted': name ")
    assert "make sure every name used in its annotations is importable" in str(err.value)

    with pytest.raises(ToolRegistrationError) as err:
        function_spec(max, name="biggest")  # a builtin without a readable signature
    assert str(err.value).startswith("cannot read the signature of 'biggest': ")
    assert str(err.value).endswith("wrap it in a def with typed parameters")

    def positional(x: int, /) -> None: ...

    with pytest.raises(ToolRegistrationError) as err:
        function_spec(positional)
    assert str(err.value) == (
        "tool 'positional': positional-only parameter 'x' cannot be passed by name; "
        "remove the '/' from its signature"
    )


def test_parse_docstring_handles_missing_and_odd_docs():
    assert parse_docstring(None).description == ""
    doc = parse_docstring("Only a summary.")
    assert doc.description == "Only a summary." and doc.args == {}
    doc = parse_docstring("Sum.\n\nArgs:\n    a: one\n    b: two\n\nRaises:\n    X: never")
    assert doc.args == {"a": "one", "b": "two"}


def test_rest_and_numpy_docstrings_describe_arguments_too():
    # Their markup (":param a: ...", "Parameters / ----------") landed in the tool's
    # description verbatim and no argument got a description.
    rest = parse_docstring(
        """Add numbers.

        :param a: The first number.
        :param int b: The second
            number.
        :type a: int
        :returns: The sum.
        """
    )
    assert rest.description == "Add numbers."
    assert rest.args == {"a": "The first number.", "b": "The second number."}
    numpy = parse_docstring(
        """Add numbers.

        Parameters
        ----------
        a : int
            The first number.
        b : int, optional
            The second
            number.

        Returns
        -------
        int
            The sum.
        """
    )
    assert numpy.description == "Add numbers."
    assert numpy.args == {"a": "The first number.", "b": "The second number."}
    # A line of dashes under ordinary prose is prose.
    prose = parse_docstring("Text with a rule\n---\nand more")
    assert prose.description == "Text with a rule\n---\nand more" and prose.args == {}


@dataclasses.dataclass
class Paging:
    page: int = 1
    size: int = 20


T = TypeVar("T")


def test_loose_annotations_defaults_json_cannot_hold_and_prose_in_args():
    def fetch(
        ids: typing.Sequence,  # bare: items of any type
        meta: dict[str, Any],
        weight: Annotated[float, 0.5],
        paging: Paging,
        tags: frozenset[str] = frozenset(),
    ) -> None:
        """Fetch records.

        Args:
            (the arguments are described by their types)
            weight: How much each record counts.
        """

    spec, _ = function_spec(fetch)
    p = spec.parameters["properties"]
    assert p["ids"] == {"type": "array"}
    assert p["meta"] == {"type": "object"}  # any values: no additionalProperties
    # Annotated metadata that is not text leaves the docstring's description in place.
    assert p["weight"] == {"type": "number", "description": "How much each record counts."}
    # A record whose fields all have defaults requires none of them.
    assert p["paging"] == {
        "type": "object",
        "properties": {
            "page": {"type": "integer", "default": 1},
            "size": {"type": "integer", "default": 20},
        },
        "additionalProperties": False,
    }
    # frozenset() has no JSON form: the default is not recorded, the item type is.
    assert p["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert spec.parameters["required"] == ["ids", "meta", "weight", "paging"]
    assert spec.description == "Fetch records."  # the prose line is neither summary nor arg

    def generic(x: T) -> None: ...

    with pytest.raises(ToolRegistrationError) as err:
        function_spec(generic)
    assert str(err.value).startswith(
        "tool 'generic', parameter 'x': cannot describe type ~T in JSON schema; annotate it"
    )


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: ToolSpec(name=5), "ToolSpec.name is a non-empty string, not 5"),
        (lambda: ToolSpec(name=""), "ToolSpec.name is a non-empty string, not ''"),
        (lambda: ToolSpec(name="f", description=5), "ToolSpec.description is a string, not 5"),
        (lambda: ToolSpec(name="f", parameters="x"), "ToolSpec.parameters is a JSON-schema"),
        (lambda: ToolSpec.from_openai({}), "cannot read the tool spec {}; pass {'name': ..."),
        (
            lambda: Toolbox().register_external({"name": 5}, lambda call: "ok"),
            "ToolSpec.name is a non-empty string, not 5",
        ),
    ],
)
def test_a_tool_spec_of_the_wrong_shape_is_refused_when_built(make, problem):
    # A name of 5 was accepted and sent to the model as a number; from_openai({}) was a
    # bare KeyError.
    with pytest.raises(ToolRegistrationError) as err:
        make()
    assert str(err.value).startswith(problem)


class Order(TypedDict):
    item: str
    color: typing.NotRequired[Color]  # a string (future import): 3.10 never reads it


class Patch(TypedDict, total=False):
    id: typing.Required[int]
    note: str


@pytest.mark.skipif(not hasattr(typing, "NotRequired"), reason="typing.NotRequired is 3.11+")
def test_typeddict_keys_marked_required_or_not():
    # This module uses `from __future__ import annotations`, under which Python 3.11
    # cannot see NotRequired when it builds __required_keys__: registration failed
    # ("cannot describe type typing.NotRequired[...]"), then calls without the key
    # were refused.
    tb = Toolbox()

    @tb.register
    def place(order: Order, patch: Patch) -> str:
        return f"{order!r} {patch!r}"

    p = tb.get("place").spec.parameters["properties"]
    assert p["order"]["properties"]["color"] == {"type": "string", "enum": ["red", "green"]}
    assert p["order"]["required"] == ["item"]
    assert p["patch"]["required"] == ["id"]
    ok = tb.execute(ToolCall("place", {"order": {"item": "pen"}, "patch": {"id": 1}}))
    assert (ok.is_error, ok.content) == (False, "{'item': 'pen'} {'id': 1}")
    full = {"order": {"item": "pen", "color": "red"}, "patch": {"id": 1, "note": "n"}}
    typed = tb.execute(ToolCall("place", full)).content
    assert typed == "{'item': 'pen', 'color': <Color.RED: 'red'>} {'id': 1, 'note': 'n'}"
    missing = tb.execute(ToolCall("place", {"order": {"item": "pen"}, "patch": {"note": "n"}}))
    assert missing.is_error and "argument 'patch.id' is required (integer)" in missing.content


def test_defaults_json_cannot_hold_as_numbers_are_not_recorded():
    # inf was recorded as `"default": Infinity`, which is not JSON: a template's tojson
    # or a strict reader of the tool spec chokes on it.
    def scan(limit: float = math.inf, eps: float = math.nan, step: float = 0.5) -> None: ...

    p = params(scan)
    assert p["properties"] == {
        "limit": {"type": "number"},
        "eps": {"type": "number"},
        "step": {"type": "number", "default": 0.5},
    }
    assert "required" not in p


class Greeter:
    """A greeter object."""

    def __call__(self, who: str, loud: bool = False) -> str:
        """Greet someone.

        Args:
            who: Whom to greet.
        """
        return f"hi {who}{'!' if loud else ''}"


def test_callable_objects_and_partials_are_tools():
    # Both were refused: "cannot resolve the type hints of ...: <obj> is not a module,
    # class, method, or function", which blamed the annotations.
    def power(base: int, exp: int = 2) -> int:
        """Raise a number to a power.

        Args:
            base: The number.
            exp: The power.
        """
        return base**exp

    tb = Toolbox()
    tb.register(Greeter(), name="greet")
    tb.register(functools.partial(power, exp=3), name="cube")
    greet = tb.get("greet").spec
    assert greet.description == "Greet someone."
    assert greet.parameters["properties"] == {
        "who": {"type": "string", "description": "Whom to greet."},
        "loud": {"type": "boolean", "default": False},
    }
    cube = tb.get("cube").spec
    assert cube.description == "Raise a number to a power."
    assert cube.parameters["properties"]["exp"] == {
        "type": "integer",
        "description": "The power.",
        "default": 3,
    }
    assert tb.execute(ToolCall("greet", {"who": "Ann", "loud": True})).content == "hi Ann!"
    assert tb.execute(ToolCall("cube", {"base": 2})).content == "8"


def test_generator_functions_are_refused_with_what_to_do():
    # A generator tool registered fine and the model got '"<generator object ...>"'.
    def numbers(n: int) -> typing.Iterator[int]:
        yield from range(n)

    async def anumbers(n: int) -> typing.AsyncIterator[int]:
        yield n

    for func in (numbers, anumbers):
        with pytest.raises(ToolRegistrationError, match=r"generator function.*return a list"):
            Toolbox().register(func)


def test_an_optional_or_annotated_tool_context_is_still_injected():
    # `ctx: ToolContext | None = None` (so Python code can call the tool too) was read
    # as an argument the model sends, and registration failed on ToolContext's fields.
    tb = Toolbox()

    @tb.register
    def where(q: str, ctx: ToolContext | None = None) -> str:
        return f"{q} from {ctx.call.name if ctx else 'python'}"

    @tb.register
    def named(ctx: Annotated[ToolContext, "injected"]) -> str:
        return ctx.call.name

    assert tb.get("where").spec.parameters["properties"] == {"q": {"type": "string"}}
    assert tb.get("named").spec.parameters["properties"] == {}
    assert tb.execute(ToolCall("where", {"q": "hi"})).content == "hi from where"
    assert tb.execute(ToolCall("named")).content == "named"
    assert where("hi") == "hi from python"

    def nested(contexts: list[ToolContext]) -> None: ...

    with pytest.raises(ToolRegistrationError, match="ToolContext is filled by the toolbox"):
        tb.register(nested)


class Mixed(enum.Enum):
    NAME = "one"
    ONE = 1


def test_a_boolean_never_becomes_an_enum_member_or_literal_equal_to_it():
    tb = Toolbox()

    @tb.register
    def pick(m: Mixed | bool, lit: Literal[1, "a"] | bool = "a") -> str:
        """Pick."""
        return repr((m, lit))

    view = tb.view([])
    # true is not the member whose value is 1 (Python's True == 1 would say it is)
    assert tb.execute(ToolCall("pick", {"m": True, "lit": True}), view).content == "(True, True)"
    assert tb.execute(ToolCall("pick", {"m": 1, "lit": 1.0}), view).content == (
        "(<Mixed.ONE: 1>, 1)"
    )

    @tb.register
    def only(m: Mixed, lit: Literal[1, "a"]) -> str:
        """Only."""
        return "ran"

    result = tb.execute(ToolCall("only", {"m": True, "lit": False}), tb.view([]))
    assert result.is_error
    assert "argument 'm': true is not one of: \"one\", 1" in result.content
    assert "argument 'lit': false is not one of: 1, \"a\"" in result.content


@dataclasses.dataclass
class Sized:
    n: int = None  # type: ignore[assignment]  # a field's None default: its type decides


def test_defaults_say_what_the_function_takes():
    def f(
        a: int = None,  # type: ignore[assignment]  # noqa: RUF013 - the case under test
        b: int = 1.5,  # type: ignore[assignment]
        lit: Literal[Color.RED, "x"] = Color.RED,
        c: Sized | None = None,
    ) -> str:
        """F."""
        return repr((a, b, lit, c))

    props = params(f)["properties"]
    # x: int = None takes null, so the schema says so (and its default null fits it)
    assert props["a"] == {"type": ["integer", "null"], "default": None}
    assert "default" not in props["b"]  # 1.5 is no integer: not advertised
    assert props["lit"] == {"type": "string", "enum": ["red", "x"], "default": "red"}
    assert props["c"]["anyOf"][0]["properties"]["n"] == {"type": "integer"}
    tb = Toolbox()
    tb.register(f)
    view = tb.view([])
    result = tb.execute(ToolCall("f", {"a": None, "lit": "red"}), view)
    assert result.content == "(None, 1.5, <Color.RED: 'red'>, None)"
    result = tb.execute(ToolCall("f", {"a": 2, "lit": "x", "c": {"n": 3}}), view)
    assert result.content == "(2, 1.5, 'x', Sized(n=3))"


# What a tool gets: its annotated Python value, from the JSON a model sends -------------


@attrs.frozen
class Pt:
    x: int
    y: float = 0.0


@dataclasses.dataclass
class Bag:
    tags: list[str]
    size: int | None = None


def _as_json(v):
    """``v`` as the model writes it: enum members as values, records and tuples as JSON."""
    if isinstance(v, enum.Enum):
        return v.value
    if attrs.has(type(v)) or dataclasses.is_dataclass(v):
        names = [
            f.name for f in (attrs.fields(type(v)) if attrs.has(type(v)) else dataclasses.fields(v))
        ]
        return {n: _as_json(getattr(v, n)) for n in names}
    if isinstance(v, dict):
        return {k: _as_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_as_json(x) for x in v]
    return v


_finite = st.floats(allow_nan=False, allow_infinity=False)
_pts = st.builds(Pt, st.integers(), _finite)
_colors = st.sampled_from(list(Color))


@pytest.mark.parametrize(
    ("annotation", "values"),
    [
        (int, st.integers()),
        (float, _finite),
        (bool, st.booleans()),
        (str, st.text()),
        (Optional[int], st.none() | st.integers()),  # noqa: UP045 - the spelling under test
        (tuple[int, str], st.tuples(st.integers(), st.text())),
        (tuple[float, ...], st.lists(_finite).map(tuple)),
        (set[int], st.sets(st.integers())),
        (frozenset[str], st.frozensets(st.text())),
        (dict[str, int], st.dictionaries(st.text(), st.integers())),
        (Literal["a", 1, True], st.sampled_from(["a", 1, True])),
        (Color, _colors),
        (int | str, st.integers() | st.text()),
        (float | str, _finite | st.text()),
        (str | bool | None, st.none() | st.booleans() | st.text()),
        (Pt, _pts),
        (Bag, st.builds(Bag, st.lists(st.text()), st.none() | st.integers())),
        (Person, st.fixed_dictionaries({"name": st.text(), "age": st.integers()})),
        (list[tuple[int, Color]], st.lists(st.tuples(st.integers(), _colors))),
        (dict[str, Pt] | None, st.none() | st.dictionaries(st.text(), _pts)),
    ],
)
def test_a_tool_gets_the_value_of_its_annotation_from_the_json_sent(annotation, values):
    tb = Toolbox()
    got = []

    def take(x):
        """Take."""
        got.append(x)
        return "ok"

    take.__annotations__ = {"x": annotation, "return": str}
    tb.register(take)
    view = tb.view([])

    @settings(max_examples=40, deadline=None)
    @given(values)
    def check(value):
        got.clear()
        sent = json.loads(json.dumps({"x": _as_json(value)}))
        result = tb.execute(ToolCall("take", sent), view)
        assert not result.is_error, result.content
        assert got == [value] and type(got[0]) is type(value)

    check()
