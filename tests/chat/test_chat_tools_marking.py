# SPDX-License-Identifier: MIT
"""register_tool marks functions; main() finds them without a global registry."""

from __future__ import annotations

import pytest

from mp13chat._errors import ChatError
from mp13chat._tools import ToolRegistration, as_registration, marked_tools, register_tool


def test_register_tool_returns_the_function_and_marks_it():
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    assert register_tool(lookup, risk="high") is lookup
    reg = as_registration(lookup)
    assert reg.func is lookup
    assert reg.options == {"risk": "high"}


def test_decorator_forms():
    @register_tool
    def a() -> str:
        return "a"

    @register_tool(name="bee")
    def b() -> str:
        return "b"

    assert as_registration(a).options == {}
    assert as_registration(b).options == {"name": "bee"}


def test_marked_tools_are_found_once_in_namespace_order():
    def one():
        return 1

    def two():
        return 2

    def plain():
        return 3

    register_tool(one)
    register_tool(two)
    found = marked_tools([{"x": two, "y": plain, "z": one}, {"again": two}])
    assert [r.func for r in found] == [two, one]


def test_plain_functions_become_registrations_and_junk_is_refused():
    def f():
        return 0

    assert as_registration(f) == ToolRegistration(f)
    with pytest.raises(ChatError):
        as_registration(42)


def test_objects_without_attributes_are_refused_clearly():
    with pytest.raises(ChatError, match="tools="):
        register_tool(len)
