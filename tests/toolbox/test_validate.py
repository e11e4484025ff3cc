# SPDX-License-Identifier: MIT
"""Argument validation: what a model is told when its call does not fit the schema."""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_toolbox import function_spec, validate


def schema_of(func):
    return function_spec(func)[0].parameters


def _tool(name: str, count: int, tags: list[str] | None = None, mode: str = "a") -> None: ...


SCHEMA = schema_of(_tool)


def test_valid_arguments_pass_unchanged():
    args = {"name": "x", "count": 2, "tags": ["a"], "mode": "b"}
    assert validate(SCHEMA, args) == (args, [])


def test_each_problem_names_the_argument_the_expectation_and_the_value():
    _, problems = validate(SCHEMA, {"count": "5", "tags": ["a", 3], "extra": 1})
    text = "\n".join(problems)
    assert "argument 'name' is required (string)" in text
    assert "argument 'count': expected integer, got string \"5\"" in text
    assert "argument 'tags[1]': expected string, got integer 3" in text
    assert "argument 'extra' is not accepted; accepted arguments: name, count, tags, mode" in text


def test_integral_floats_become_integers_and_nothing_else_is_coerced():
    fixed, problems = validate(SCHEMA, {"name": "x", "count": 3.0})
    assert problems == [] and fixed["count"] == 3 and isinstance(fixed["count"], int)
    _, problems = validate(SCHEMA, {"name": "x", "count": 3.5})
    assert problems
    _, problems = validate(SCHEMA, {"name": "x", "count": True})
    assert problems  # a bool is not an integer in JSON schema


def test_enum_anyof_ranges_and_strings():
    schema = {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]},
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
    }
    assert validate(schema, {"unit": "c", "n": 2, "either": "ab", "code": "EUR"})[1] == []
    _, problems = validate(schema, {"unit": "k", "n": 9, "either": "abc", "code": "eu"})
    text = "\n".join(problems)
    assert '"k" is not one of: "c", "f"' in text
    assert "argument 'n': must be <= 3, got 9" in text
    assert "argument 'either'" in text and "matches none" in text
    assert "does not match the pattern" in text


def test_const_allof_extra_schema_and_lower_bounds():
    assert validate({"const": "v1"}, "v2")[1] == ['the arguments: must be "v1", got "v2"']
    # allOf: every part applies, and the integer normalisation carries through.
    both = {"allOf": [{"type": "integer"}, {"minimum": 3}]}
    assert validate(both, 4.0) == (4, [])
    assert validate(both, 2.0)[1] == ["the arguments: must be >= 3, got 2"]
    # additionalProperties as a schema checks (and normalises) every extra key.
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    fixed, problems = validate(counts, {"a": 1, "b": "x", "c": 2.0})
    assert fixed == {"a": 1, "b": "x", "c": 2} and isinstance(fixed["c"], int)
    assert problems == ["argument 'b': expected integer, got string \"x\""]
    assert validate({"minItems": 2}, [1])[1] == ["the arguments: needs at least 2 items, got 1"]
    short = validate({"minLength": 3}, "ab")[1]
    assert short == ["the arguments: needs at least 3 characters, got 2"]


def test_a_null_where_a_value_is_needed_is_named_once():
    # The message read "expected string, got null null".
    assert validate({"type": "string"}, None)[1] == ["the arguments: expected string, got null"]
    both = {"type": "object", "properties": {"n": {"type": ["integer", "string"]}}}
    assert validate(both, {"n": None})[1] == ["argument 'n': expected integer or string, got null"]


def test_values_from_python_callers_are_named_by_their_json_kind():
    # execute() is also called from Python, where arguments may hold tuples, dict
    # subclasses or values JSON cannot encode: the message still names what was sent.
    assert validate({"type": "string"}, (1, 2))[1] == [
        "the arguments: expected string, got array [1, 2]"
    ]
    ordered = collections.OrderedDict(a=1)
    assert validate({"type": "integer"}, ordered)[1] == [
        'the arguments: expected integer, got object {"a": 1}'
    ]
    assert validate({"type": "string"}, {1, 2})[1] == [
        "the arguments: expected string, got set {1, 2}"
    ]


def test_a_pattern_out_of_time_stops_all_checking_with_one_message():
    slow = {"type": "string", "pattern": "^(a|a)*$"}
    value = "a" * 30 + "!"
    # The later argument is not checked: the budget is spent.
    schema = {"type": "object", "properties": {"s": slow, "n": {"type": "integer"}}}
    _, problems = validate(schema, {"s": value, "n": "x"}, budget_s=0.3)
    assert len(problems) == 1 and "could not be checked against the pattern" in problems[0]
    # Inside anyOf the timeout is the answer, not "matches none of the allowed forms".
    _, problems = validate({"anyOf": [slow, {"type": "integer"}]}, value, budget_s=0.3)
    assert len(problems) == 1 and "could not be checked against the pattern" in problems[0]


def test_unknown_keywords_and_types_are_ignored():
    schema = {"type": "object", "properties": {"x": {"type": "date", "format": "weird"}}}
    assert validate(schema, {"x": "anything"})[1] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(json_values)
def test_validation_never_raises_on_any_json(value):
    _, problems = validate(SCHEMA, value)
    assert isinstance(problems, list)
    if not isinstance(value, dict):
        assert problems


# JSON schema, keyword by keyword (draft 2020-12) ---------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ({"enum": [1, "a"]}, 1.0, True),  # 1.0 is the number 1
        ({"enum": [1, "a"]}, True, False),  # true is not 1, though Python says True == 1
        ({"enum": [True]}, 1, False),
        ({"enum": [0]}, False, False),
        ({"enum": [None, 0]}, False, False),
        ({"enum": [[1, 2]]}, [1.0, 2], True),
        ({"enum": [[1]]}, [True], False),
        ({"enum": [{"a": 1, "b": 0}]}, {"b": 0.0, "a": 1}, True),  # key order is not part
        ({"enum": [{"a": 0}]}, {"a": False}, False),
        ({"const": 1}, True, False),
        ({"const": False}, 0, False),
        ({"const": [0]}, [False], False),
        ({"const": {"x": [1]}}, {"x": [1.0]}, True),
        ({"const": "1"}, 1, False),
    ],
)
def test_enum_and_const_use_json_equality(schema, value, ok):
    assert (validate(schema, value)[1] == []) is ok


_scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 1.5])


@settings(max_examples=200, deadline=None)
@given(_scalars, st.lists(_scalars, max_size=4))
def test_enum_accepts_exactly_the_json_equal_values(value, allowed):
    def same(a, b):  # JSON equality: a boolean is never a number
        return isinstance(a, bool) == isinstance(b, bool) and a == b

    accepted = validate({"enum": allowed}, value)[1] == []
    assert accepted is any(same(value, a) for a in allowed)


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ({"type": "integer"}, 1.0, True),
        ({"type": "integer"}, 1.5, False),
        ({"type": "integer"}, True, False),
        ({"type": "number"}, False, False),
        ({"type": ["integer", "null"]}, None, True),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 3, True),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 3, False),  # fits both
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 3.5, True),
        ({"anyOf": [{"type": "integer"}, {"type": "number"}]}, 3, True),
        ({"anyOf": [{"type": "integer"}], "oneOf": [{"minimum": 10}]}, 5, False),  # both apply
        ({"not": {"type": "string"}}, 3, True),
        ({"not": {"type": "string"}}, "3", False),
        ({"multipleOf": 0.1}, 0.3, True),  # 0.3 % 0.1 in floats is 0.0999...
        ({"multipleOf": 0.01}, 19.99, True),
        ({"multipleOf": 0.1}, 0.35, False),
        ({"multipleOf": 2}, 4.0, True),
        ({"multipleOf": 2}, 3, False),
        ({"multipleOf": 1e-308}, 1e308, True),
        ({"minimum": 0, "exclusiveMaximum": 1}, 1, False),
        ({"minimum": 0, "exclusiveMaximum": 1}, 0, True),
        ({"type": "number"}, float("nan"), False),
        ({}, float("inf"), False),
        ({"minLength": 2}, "😀", False),  # one code point (two UTF-16 units, four bytes)
        ({"maxLength": 1}, "😀", True),
        ({"minLength": 1.0}, "", False),
        ({"minItems": True}, [], True),  # a boolean bound is malformed: ignored
        ({"uniqueItems": True}, [1, 1.0], False),
        ({"uniqueItems": True}, [1, True], True),
        ({"uniqueItems": "yes"}, [1, 1], True),  # not the boolean true: malformed, ignored
        ({"pattern": "b"}, "abc", True),  # search, not match
        ({"pattern": "^b"}, "abc", False),
        ({"format": "date"}, "not a date", True),  # an annotation in 2020-12
        ({"minProperties": 1}, {}, False),
        ({"maxProperties": 1}, {"a": 1, "b": 2}, False),
        ({"properties": {"a": False}}, {"a": 1}, False),
        ({"properties": {"a": False}}, {}, True),
        ({"prefixItems": [{"type": "string"}], "items": False}, ["a"], True),
        ({"prefixItems": [{"type": "string"}], "items": False}, ["a", 1], False),
        ({"items": {"type": "integer"}}, [1, "2"], False),
        ({"additionalProperties": {"type": "integer"}}, {"a": "1"}, False),
    ],
)
def test_keywords_follow_json_schema(schema, value, ok):
    assert (validate(schema, value)[1] == []) is ok


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        # OpenAPI 3.0: null was refused ("expected string, got null") though the spec
        # said nullable; other values are still checked
        ({"type": "string", "nullable": True}, None, True),
        ({"type": "string", "nullable": True}, 3, False),
        ({"type": "string", "nullable": False}, None, False),
        ({"type": "integer", "enum": [1, 2], "nullable": True}, None, True),
        # Draft 4: the flag makes its bound strict; 0 passed the "> 0" its author meant
        ({"minimum": 0, "exclusiveMinimum": True}, 0, False),
        ({"minimum": 0, "exclusiveMinimum": True}, 0.5, True),
        ({"minimum": 0, "exclusiveMinimum": False}, 0, True),
        ({"maximum": 10, "exclusiveMaximum": True}, 10, False),
        ({"maximum": 10, "exclusiveMaximum": True}, 9.5, True),
        ({"exclusiveMaximum": True}, 10**9, True),  # a flag with no bound bounds nothing
        # Draft 4 tuples: a list of "items" per position was skipped entirely
        ({"items": [{"type": "integer"}, {"type": "string"}]}, [1, "a"], True),
        ({"items": [{"type": "integer"}, {"type": "string"}]}, ["a", 1], False),
        ({"items": [{"type": "integer"}]}, [1, "anything"], True),
        ({"items": [{"type": "integer"}], "additionalItems": False}, [1, 2], False),
        ({"items": [{"type": "integer"}], "additionalItems": {"type": "string"}}, [1, 2], False),
        ({"items": [{"type": "integer"}], "additionalItems": {"type": "string"}}, [1, "b"], True),
        # Draft 4 definitions: any local JSON pointer is followed
        ({"definitions": {"n": {"type": "integer"}}, "$ref": "#/definitions/n"}, "1", False),
        ({"definitions": {"n": {"type": "integer"}}, "$ref": "#/definitions/n"}, 1, True),
    ],
)
def test_older_forms_are_checked_as_their_authors_meant(schema, value, ok):
    assert (validate(schema, value)[1] == []) is ok


def test_older_forms_name_the_bound_and_position_in_their_messages():
    assert validate({"minimum": 0, "exclusiveMinimum": True}, 0)[1] == [
        "the arguments: must be > 0, got 0"
    ]
    assert validate({"items": [{"type": "integer"}], "additionalItems": False}, [1, 2])[1] == [
        "argument '[1]': no value is accepted here; leave it out"
    ]


TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
}


def test_refs_to_defs_are_followed_recursively_and_name_the_argument():
    good = {"root": {"value": 1, "children": [{"value": 2, "children": []}]}}
    assert validate(TREE, good) == (good, [])
    bad = {"root": {"value": 1, "children": [{"value": "2"}, {"children": [], "x": 1}]}}
    text = "\n".join(validate(TREE, bad)[1])
    assert "argument 'root.children[0].value': expected integer, got string \"2\"" in text
    assert "argument 'root.children[1].value' is required (integer)" in text
    assert validate(TREE, {})[1] == ["argument 'root' is required (object) but was not given"]
    assert "argument 'root.children[1].x' is not accepted" in text
    # A ref is checked alongside its siblings; refs that only lead to each other end.
    assert validate({"$ref": "#/$defs/n", "maximum": 3, "$defs": {"n": {"minimum": 1}}}, 5)[1]
    looping = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a", "minimum": 2}}}
    assert validate({**looping, "$ref": "#/$defs/a"}, 1)[1] == [
        "the arguments: must be >= 2, got 1"
    ]
    assert validate({"$ref": "#"}, 1) == (1, [])


def test_combinators_say_which_forms_and_what_is_wrong():
    _, problems = validate({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, {"n": 3}["n"])
    assert problems == [
        "the arguments: 3 fits more than one of the allowed forms (forms 1 and 2) where "
        "exactly one must fit; send a value that fits only one"
    ]
    schema = {"properties": {"tag": {"not": {"enum": ["admin"]}}}}
    assert validate(schema, {"tag": "admin"})[1] == [
        'argument \'tag\': "admin" is excluded (it matches {"enum": ["admin"]}, which the '
        "schema forbids); send another value"
    ]
    _, problems = validate({"properties": {"price": {"multipleOf": 0.01}}}, {"price": 1.005})
    assert problems == ["argument 'price': must be a multiple of 0.01, got 1.005"]
    _, problems = validate({"properties": {"x": {"type": "number"}}}, {"x": float("nan")})
    assert problems == ["argument 'x': NaN is not a JSON number; send a finite number"]


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**6), 10**6), st.integers(1, 1000), st.integers(0, 4))
def test_multiple_of_is_exact_on_decimals(units, step_units, places):
    # n / 10**places is a multiple of s / 10**places exactly when n is a multiple of s
    scale = 10**places
    value, step = units / scale, step_units / scale
    ok = validate({"multipleOf": step}, value)[1] == []
    assert ok is (units % step_units == 0)


# Differential: the validator agrees with the reference implementation, where installed ---

_fuzz_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.0, 1.0, 1.5, -2.5, 0.3, 0.1])
    | st.sampled_from(["", "a", "ab", "b1", "😀x"])
)
_fuzz_values = st.recursive(
    _fuzz_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=6,
)
_types = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])
_assertions = st.fixed_dictionaries(
    {},
    optional={
        "type": _types | st.lists(_types, min_size=1, max_size=3, unique=True),
        "enum": st.lists(_fuzz_scalars, min_size=1, max_size=3),
        "const": _fuzz_scalars,
        "minimum": st.integers(-3, 3),
        "maximum": st.integers(-3, 3),
        "exclusiveMinimum": st.sampled_from([-1, 0, 0.5]),
        "exclusiveMaximum": st.sampled_from([1, 1.5]),
        "multipleOf": st.sampled_from([0.1, 0.5, 2, 3]),
        "minLength": st.integers(0, 2),
        "maxLength": st.integers(0, 2),
        # no $ or \d: there the reference uses Python's regex semantics, not ECMA-262's
        "pattern": st.sampled_from(["a", "^a", "b|1", "[ab]+"]),
        "minItems": st.integers(0, 2),
        "maxItems": st.integers(0, 2),
        "uniqueItems": st.booleans(),
        "minProperties": st.integers(0, 2),
        "maxProperties": st.integers(0, 2),
        "required": st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True),
    },
)
_fuzz_schemas = st.recursive(
    _assertions | st.booleans(),
    lambda inner: st.tuples(
        _assertions,
        st.fixed_dictionaries(
            {},
            optional={
                "items": inner,
                "prefixItems": st.lists(inner, min_size=1, max_size=2),
                "properties": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
                "additionalProperties": inner,
                "anyOf": st.lists(inner, min_size=1, max_size=2),
                "oneOf": st.lists(inner, min_size=1, max_size=2),
                "allOf": st.lists(inner, min_size=1, max_size=2),
                "not": inner,
            },
        ),
    ).map(lambda pair: {**pair[0], **pair[1]}),
    max_leaves=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_fuzz_schemas, _fuzz_values)
def test_validation_agrees_with_the_reference_implementation(schema, value):
    jsonschema = pytest.importorskip("jsonschema")
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    problems = validate(schema, value, budget_s=None)[1]
    assert (problems == []) is expected, problems
