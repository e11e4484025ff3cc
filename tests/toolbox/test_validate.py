# SPDX-License-Identifier: MIT
"""Argument validation: what a model is told when its call does not fit the schema."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
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
