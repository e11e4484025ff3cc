# SPDX-License-Identifier: MIT
"""register_tool attaches options to a function; main(tools=...) registers it with them."""

from __future__ import annotations

import pytest

from mp13chat._errors import ChatError
from mp13chat._tools import ToolRegistration, as_registration, register_tool


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


def test_plain_functions_become_registrations_and_junk_is_refused():
    def f():
        return 0

    assert as_registration(f) == ToolRegistration(f)
    with pytest.raises(ChatError):
        as_registration(42)


def test_objects_without_attributes_are_refused_clearly():
    with pytest.raises(ChatError, match=r"ChatApp\.register_tool"):
        register_tool(len)


@pytest.mark.parametrize("tools", [5, lambda: 0, "word_count"])  # a str: "'w' is not a tool"
def test_tools_that_are_not_a_list_are_refused(tools):
    from mp13chat import ChatApp

    with pytest.raises(ChatError, match=r"tools is a list of functions, not .*tools=\[f, \.\.\.\]"):
        ChatApp(tools=tools)


@pytest.mark.parametrize("argv", ["--model tiny", 5])
def test_argv_that_is_not_a_list_is_refused_not_split(argv):
    """A string was split into one-character arguments; argparse then failed on them."""
    from mp13chat import ChatApp

    with pytest.raises(ChatError, match=r"argv is a list of command-line arguments"):
        ChatApp().main(argv)


def test_register_tool_refuses_what_is_not_a_function():
    with pytest.raises(ChatError, match=r"register_tool needs a function, got 42"):
        register_tool(42)
    with pytest.raises(ChatError, match=r"register_tool needs a function, got 'lookup'"):
        register_tool(risk="high")("lookup")


def test_a_registration_given_as_is_keeps_its_options():
    from mp13chat import ChatApp

    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    given = ToolRegistration(lookup, {"risk": "high"})
    assert as_registration(given) is given
    assert ChatApp(tools=[given]).take_pending_tools() == [given]


def test_a_wrong_option_fails_where_it_is_written_not_at_the_start():
    # risk="extreme" or an unknown option used to pass here and fail the app's start.
    from mp13_toolbox import ToolSettingError
    from mp13chat import ChatApp

    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    with pytest.raises(ToolSettingError, match="unknown risk 'extreme'; use one of: low"):
        register_tool(lookup, risk="extreme")
    with pytest.raises(ToolSettingError, match="unknown risk 'extreme'"):
        register_tool(risk="extreme")(lookup)
    with pytest.raises(ChatError, match=r"unexpected keyword argument 'colour'; the options are"):
        register_tool(lookup, colour="red")
    with pytest.raises(ToolSettingError, match="unknown risk 'extreme'"):
        ChatApp().register_tool(lookup, risk="extreme")  # before the app started
    assert not hasattr(lookup, "__mp13chat_tool__")  # nothing was attached
