# SPDX-License-Identifier: MIT
"""Builtins: the safe calculator, current_time and the tool_help guide pattern."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mp13_toolbox import (
    BUILTINS,
    CalculatorError,
    Toolbox,
    ToolboxError,
    ToolCall,
    ToolsScope,
    UnknownToolError,
)
from mp13_toolbox._builtins import calculator, current_time


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("2 + 2", "4"),
        ("2 * (3 + 4) ** 2", "98"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("1 / 4", "0.25"),
        ("2^10", "1024"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(pi, 2)", "3.14"),
        ("max(1, 5, 3)", "5"),
        ("factorial(5)", "120"),
        ("2 ** 100", str(2**100)),
        ("+-3", "-3"),
        ("1e3 * 2", "2000"),
    ],
)
def test_calculator_results(expr, expected):
    assert calculator(expr) == expected


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("().__class__", "not allowed"),
        ("open('x')", "unknown function 'open'"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 5000", "too large"),
        ("10 ** 1000 * 10 ** 1000", "too large"),  # each factor is fine, the product is not
        ("2.0 ** 5000", "overflows"),
        ("factorial(10000)", "factorial is limited"),
        ("sqrt(-1)", "math error"),
        ("(1 +", "cannot parse"),
        ("", "empty"),
        ("1 if 1 else 2", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("True + 1", "only numbers"),
        ("(" * 300 + "1" + ")" * 300, "cannot parse|nested"),
        ("-" * 1999 + "1", "nested too deeply"),
        ("1" * 2001, "longer than"),
    ],
)
def test_calculator_refuses_with_clear_text(expr, words):
    with pytest.raises(CalculatorError, match=words):
        calculator(expr)


small = st.integers(-1000, 1000)


@given(
    st.recursive(
        small.map(str),
        lambda e: st.tuples(e, st.sampled_from("+-*"), e).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        max_leaves=12,
    )
)
def test_calculator_agrees_with_python_on_integer_arithmetic(expr):
    expected = eval(expr, {"__builtins__": {}})  # test oracle on generated digits/operators only
    assert calculator(expr) == str(expected)


def test_current_time_is_iso_and_honours_time_zones():
    utc = dt.datetime.fromisoformat(current_time("UTC"))
    assert utc.utcoffset() == dt.timedelta(0)
    assert abs((utc - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 5
    assert dt.datetime.fromisoformat(current_time()).tzinfo is not None
    tokyo = dt.datetime.fromisoformat(current_time("Asia/Tokyo"))
    assert tokyo.utcoffset() == dt.timedelta(hours=9)
    with pytest.raises(ValueError, match="IANA name"):
        current_time("Mars/Olympus")


def test_current_time_takes_a_zone_written_in_the_wrong_case():
    # "utc" and "asia/tokyo" (as models write them) were unknown time zones: IANA names
    # are case-sensitive file names.
    assert dt.datetime.fromisoformat(current_time("utc")).utcoffset() == dt.timedelta(0)
    tokyo = dt.datetime.fromisoformat(current_time("asia/tokyo"))
    assert tokyo.utcoffset() == dt.timedelta(hours=9)


def test_builtins_register_through_the_public_api_and_never_clobber():
    tb = Toolbox()
    tb.register(lambda expression: "mine", name="calculator", description="")
    assert tb.add_builtins() == ["current_time", "tool_help"]
    assert tb.execute(ToolCall("calculator", {"expression": "1"})).content == "mine"
    assert set(Toolbox(builtins=True).names()) == set(BUILTINS)
    with pytest.raises(UnknownToolError, match="builtins: calculator"):
        Toolbox(builtins=["abacus"])


def test_toolbox_builtins_takes_one_name_or_several():
    # A string was read letter by letter: "no builtin tool named 'c', 'a', 'l', ...".
    assert Toolbox(builtins="calculator").names() == ["calculator"]
    assert Toolbox(builtins=["calculator", "tool_help"]).names() == ["calculator", "tool_help"]
    with pytest.raises(UnknownToolError, match=r"^no builtin tool named 'calc'; builtins: "):
        Toolbox(builtins="calc")
    with pytest.raises(ToolboxError, match="add_builtins takes builtin names, not 5"):
        Toolbox(builtins=5)


def test_tool_help_lists_the_callable_tools_of_the_callers_view():
    tb = Toolbox(builtins=True)

    @tb.register(mode="silent")
    def convert_units(value: float, unit: str) -> str:
        """Convert between units.

        Args:
            value: The amount.
            unit: Target unit.
        """
        return ""

    view = tb.view([ToolsScope({"current_time": "disabled"})])
    listing = tb.execute(ToolCall("tool_help"), view).content
    assert "- convert_units: Convert between units." in listing  # silent tools are discoverable
    assert "current_time" not in listing  # disabled ones are not
    detail = tb.execute(ToolCall("tool_help", {"name": "convert_units"}), view)
    assert '"unit"' in detail.content and "The amount." in detail.content
    r = tb.execute(ToolCall("tool_help", {"name": "current_time"}), view)
    assert r.is_error and "callable tools:" in r.content


def test_calculator_through_the_toolbox_reports_errors_as_results():
    tb = Toolbox(builtins=True)
    r = tb.execute(ToolCall("calculator", {"expression": "1/0"}))
    assert r.is_error and r.content.endswith("division by zero")
    assert math.isclose(
        float(tb.execute(ToolCall("calculator", {"expression": "e"})).content), math.e
    )
