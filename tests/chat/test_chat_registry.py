# SPDX-License-Identifier: MIT
"""The command registry: docstring help, unique-prefix matching, subcommands, parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mp13chat._errors import ChatError, UnknownCommandError, UsageError
from mp13chat._registry import (
    CommandLine,
    CommandRegistry,
    command,
    group_command,
    parse_assignments,
)


@command("save", group="session", usage="/save FILE")
def save(app, line):
    """Save the session.

    More text.
    """


@command("search", group="session")
def search(app, line):
    """Search messages."""


@command("switch", group="conversations", aliases=("sw",))
def switch(app, line):
    """Switch conversation."""


@command("set", group="system", usage="/set TEXT")
def sys_set(app, line):
    """Set the system message."""


@command("show", group="system")
def sys_show(app, line):
    """Show the system message."""


SYSTEM = group_command("system", sys_set, sys_show, group="system", doc="System.", default="show")
#: The group holds its subcommands with their usage under its path (/system set TEXT).
SYSTEM_SET, SYSTEM_SHOW = SYSTEM.subcommands


def registry():
    return CommandRegistry([save, search, switch, SYSTEM])


def test_help_text_comes_from_the_docstring():
    assert save.summary == "Save the session."
    assert "More text." in save.doc
    assert save.usage == "/save FILE"
    assert search.usage == "/search"


def test_exact_alias_and_unique_prefix_resolve():
    reg = registry()
    assert reg.resolve("save") is save
    assert reg.resolve("sw") is switch
    assert reg.resolve("sea") is search
    assert reg.resolve("/swi") is switch
    assert reg.resolve("sy") is SYSTEM


def test_ambiguous_prefix_lists_the_candidates():
    with pytest.raises(UnknownCommandError) as err:
        registry().resolve("s")
    assert "/save" in str(err.value) and "/search" in str(err.value)


def test_unknown_command_points_to_help():
    with pytest.raises(UnknownCommandError, match="/help"):
        registry().resolve("zzz")


def test_duplicate_names_and_aliases_are_refused():
    reg = registry()
    with pytest.raises(ChatError):
        reg.add(command("sw")(lambda app, line: None))


def test_parse_splits_command_subcommand_and_arguments():
    reg = registry()
    inv = reg.parse("/sys set You are  terse.")
    assert inv.command is SYSTEM_SET and inv.command.func is sys_set.func
    assert inv.line.text == "You are  terse."
    # no subcommand -> the default one
    assert reg.parse("/system").command is SYSTEM_SHOW
    assert reg.parse("/sea  hello world").line.words == ["hello", "world"]


def test_unknown_subcommand_is_an_error():
    with pytest.raises(UnknownCommandError, match="/system"):
        registry().parse("/system frobnicate")


def test_command_line_words_and_bad_quotes():
    assert CommandLine('a "b c" d').words == ["a", "b c", "d"]
    with pytest.raises(UsageError):
        _ = CommandLine('a "b').words


def test_groups_keep_every_command():
    groups = registry().groups()
    assert {c.name for cs in groups.values() for c in cs} == {"save", "search", "switch", "system"}


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6))
def test_prefix_resolution_is_exact_or_unique(word):
    reg = registry()
    names = ["save", "search", "switch", "system", "sw"]
    matching = {n for n in names if n.startswith(word)}
    if word in names:
        assert reg.resolve(word) is not None
        return
    commands = {{"sw": "switch"}.get(n, n) for n in matching}
    if len(commands) == 1:
        assert reg.resolve(word).name == commands.pop()
    else:
        with pytest.raises(UnknownCommandError):
            reg.resolve(word)


def test_a_usage_without_arguments_refuses_them_in_the_registry():
    import asyncio

    ran = []

    @command("ping", group="test")
    def ping(app, line):
        ran.append(line.text)

    @command("echo", group="test", usage="/echo [TEXT]")
    def echo(app, line):
        ran.append(line.text)

    reg = CommandRegistry([ping, echo])
    assert not ping.takes_arguments and echo.takes_arguments
    invocation = reg.parse("/ping now")
    with pytest.raises(UsageError, match="/ping takes no arguments, got 'now'") as refused:
        asyncio.run(invocation.command.run(None, invocation.line))
    # ping was made without usage=: the refusal also tells the app's author what to write
    assert "made without usage=, so it takes none" in str(refused.value)
    assert "@command('ping', usage='/ping ARGS')" in str(refused.value)
    # a usage written out as /name refuses words as plainly as mp13chat's /quit does
    quiet = command("hush", usage="/hush")(lambda app, line: None)
    with pytest.raises(UsageError, match=r"got 'now'$"):
        asyncio.run(quiet.run(None, CommandLine("now")))
    for text in ("/ping", "/echo hi there"):
        invocation = reg.parse(text)
        asyncio.run(invocation.command.run(None, invocation.line))
    assert ran == ["", "hi there"]


def test_a_subcommand_written_as_if_alone_shows_and_checks_the_path_the_user_types():
    """A wrapper's @command("b") in group_command("grp", ...) used to show "usage: /b" in
    /help grp and refuse "/grp b extra" with "/b takes no arguments"."""
    import asyncio

    on = command("on")(lambda app, line: None)
    dim = command("dim", usage="/dim LEVEL")(lambda app, line: None)
    given = command("off", usage="/lamp off [NOW]")(lambda app, line: None)
    lamp = group_command("lamp", on, dim, given, group="test", doc="A lamp.")
    assert [c.usage for c in lamp.subcommands] == ["/lamp on", "/lamp dim LEVEL", "/lamp off [NOW]"]
    assert [c.takes_arguments for c in lamp.subcommands] == [False, True, True]
    home = group_command("home", lamp, group="test", doc="The house.")
    (nested,) = home.subcommands
    assert nested.usage == "/home lamp on|dim|off ..."
    assert [c.usage for c in nested.subcommands] == [
        "/home lamp on",
        "/home lamp dim LEVEL",
        "/home lamp off [NOW]",  # its author's path under /lamp moves with the group
    ]
    invocation = CommandRegistry([home]).parse("/home lamp on now")
    with pytest.raises(UsageError, match=r"^/home lamp on takes no arguments, got 'now'"):
        asyncio.run(invocation.command.run(None, invocation.line))


def test_a_command_that_cannot_be_typed_or_run_is_refused_where_it_is_made():
    for name in ("", "two words", "/slash", "tab\tname"):
        with pytest.raises(ChatError, match="one word without the leading /"):
            command(name)(lambda app, line: None)
    with pytest.raises(ChatError, match="one word without the leading /, got 'my alias'"):
        command("fine", aliases=("my alias",))(lambda app, line: None)
    with pytest.raises(ChatError, match="must be callable, not 42"):
        command("x")(42)
    with pytest.raises(ChatError, match="default='nope' names none of its subcommands"):
        group_command("g", save, group="test", doc=".", default="nope")
    with pytest.raises(ChatError, match="/g has neither a function nor subcommands"):
        group_command("g", group="test", doc=".")
    with pytest.raises(ChatError, match=r"is not a command; make one with @mp13chat\.command"):
        CommandRegistry().add(lambda app, line: None)  # type: ignore[arg-type]


def test_assignments_are_parsed_in_one_place_for_every_command():
    assert parse_assignments(["a=1", "b=", "a=x=y"], "options", "k=v") == {"a": "x=y", "b": ""}
    for word in ("plain", "=5"):
        with pytest.raises(UsageError, match=f"write options as k=v, got '{word}'"):
            parse_assignments([word], "options", "k=v")


def test_find_walks_a_path_of_command_names():
    reg = registry()
    assert reg.find(["system"]) is SYSTEM
    assert reg.find(["sys", "se"]) is SYSTEM_SET
    with pytest.raises(UnknownCommandError, match="/save has no subcommands, so 'x' names none"):
        reg.find(["save", "x"])
    with pytest.raises(UnknownCommandError, match="unknown command /system nope"):
        reg.find(["system", "nope"])


def test_summary_is_the_whole_first_sentence():
    @command("wrapped", group="test")
    async def wrapped(app, line):
        """Train a thing on DATASET (.json/.jsonl: messages, prompt/completion or
        text rows, e.g. one per line). Options follow.

        More detail."""

    @command("bare", group="test")
    async def bare(app, line):
        """No full stop here"""

    assert wrapped.summary == (
        "Train a thing on DATASET (.json/.jsonl: messages, prompt/completion or text rows, "
        "e.g. one per line)."
    )
    assert bare.summary == "No full stop here"


@pytest.mark.parametrize(
    ("typed", "value"),
    [
        ("on", True),
        ("True", True),
        ("true", True),
        ("no", False),
        ("False", False),
        ("None", None),
        ("null", None),
        ("3", 3),
        ("0.5", 0.5),
        ("hello", "hello"),
        ("TRUE", "TRUE"),
    ],
)
def test_a_typed_value_is_a_json_literal_a_repl_word_or_python_spelling(typed, value):
    from mp13chat._registry import parse_value

    assert parse_value(typed) == value and type(parse_value(typed)) is type(value)
