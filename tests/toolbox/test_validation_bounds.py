# SPDX-License-Identifier: MIT
"""Validation is bounded: size, backtracking patterns and depth (issue 11.10).

The sizes are the issue's: 32k items for ``uniqueItems``, a 26-character input for a
backtracking ``pattern``, 1,000 levels of nesting. Wall-clock bounds are generous
(a loaded 2-core machine); before the fix these took seconds to minutes, or raised.
"""

from __future__ import annotations

import time

from mp13_toolbox import Toolbox, ToolBudget, ToolCall, validate
from mp13_toolbox._pipeline import validation_budget_s
from mp13_toolbox._validate import DEFAULT_BUDGET_S, MAX_DEPTH

UNIQUE = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def pattern_schema(pattern: str) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}


def test_unique_items_of_32k_values_is_linear():
    xs = list(range(32_000))
    t0 = time.perf_counter()
    assert validate(UNIQUE, {"xs": xs}) == ({"xs": xs}, [])
    _, problems = validate(UNIQUE, {"xs": [*xs, 31_999.0]})
    assert time.perf_counter() - t0 < 2.0  # O(n²) took 4-9 s
    assert problems == ["argument 'xs': items must be unique, 31999.0 appears twice"]


def test_unique_items_follows_json_schema_equality():
    def dup(items):
        return bool(validate(UNIQUE, {"xs": items})[1])

    assert dup([1, 1.0]) and dup([{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}])
    assert not dup([True, 1]) and not dup(["1", 1]) and not dup([None, False, 0, ""])
    long = "x" * 20_000
    assert not dup([long + "a", long + "b"])  # once compared on a 10,000-char prefix
    assert dup([[long], [long]])


def test_a_backtracking_pattern_on_26_characters_is_bounded():
    value = {"s": "a" * 26 + "!"}
    for pattern in ("^(a+)+$", "^(a|a)*$"):  # the second backtracks in every engine
        t0 = time.perf_counter()
        _, problems = validate(pattern_schema(pattern), value, budget_s=0.5)
        assert time.perf_counter() - t0 < 5.0  # re: 3.6 s for the first, hours for the second
        assert len(problems) == 1 and pattern in problems[0]
    assert "could not be checked against the pattern" in problems[0]
    assert "send a shorter or simpler value" in problems[0]
    assert validate(pattern_schema("^(a|a)*$"), {"s": "a" * 26}, budget_s=0.5)[1] == []


def test_through_execute_the_check_stays_within_the_tools_timeout():
    tb = Toolbox()
    ran = []
    spec = {"name": "match", "parameters": pattern_schema("^(a|a)*$")}
    tb.register_external(spec, lambda call: ran.append(call) or "ran", timeout_s=0.3)
    t0 = time.perf_counter()
    r = tb.execute(ToolCall("match", {"s": "a" * 26 + "!"}))
    assert time.perf_counter() - t0 < 3.0
    assert r.is_error and "could not be checked against the pattern" in r.content
    assert ran == []
    assert tb.execute(ToolCall("match", {"s": "aaa"})).content == "ran"


def test_validation_gets_at_most_the_tools_timeout_and_the_run_the_rest():
    assert validation_budget_s(None) == DEFAULT_BUDGET_S
    assert validation_budget_s(0.3) == 0.3 and validation_budget_s(60.0) == DEFAULT_BUDGET_S
    _, problems = validate(UNIQUE, {"xs": [1, 2]}, budget_s=0.0)
    assert problems and "took too long to check" in problems[0]


def test_a_thousand_levels_give_a_validation_message():
    schema = {"type": "object", "properties": {"v": {"type": "object"}}}
    deep = {"v": nested(1_000)}
    _, problems = validate(schema, deep)
    assert problems == [
        f"argument 'v' is nested more than {MAX_DEPTH} levels deep; send a flatter value"
    ]
    # MAX_DEPTH levels of objects and arrays, the arguments object included
    assert validate(schema, {"v": nested(MAX_DEPTH - 2)})[1] == []
    assert validate(schema, {"v": nested(MAX_DEPTH - 1)})[1]
    tb = Toolbox()
    tb.register_external({"name": "take", "parameters": schema}, lambda call: "ran")
    for budget in (None, ToolBudget(max_repeats=0).start()):
        r = tb.execute(ToolCall("take", deep), budget=budget)
        assert r.is_error and "nested more than" in r.content
        assert "internal error" not in r.content
    _, problems = validate({"type": "object"}, nested(500))
    assert problems == [
        f"argument 'a' is nested more than {MAX_DEPTH} levels deep; send a flatter value"
    ]


def test_without_a_time_bound_patterns_and_sizes_are_still_checked():
    schema = pattern_schema("^[a-z]+$")
    schema["properties"]["s"]["maxLength"] = 5
    assert validate(schema, {"s": "abc"}, budget_s=None) == ({"s": "abc"}, [])
    _, problems = validate(schema, {"s": "ABCDEF"}, budget_s=None)
    assert problems == [
        "argument 's': takes at most 5 characters, got 6",
        "argument 's': \"ABCDEF\" does not match the pattern '^[a-z]+$'",
    ]
