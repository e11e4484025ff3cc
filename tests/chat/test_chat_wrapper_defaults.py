# SPDX-License-Identifier: MIT
"""What a wrapper app gets when it leaves things out: no session in the config, no
config file, a session of its own, commands without a docstring, an empty ``params``."""

from __future__ import annotations

from mp13_context import Session
from mp13_context.testing import FakeEngine, FakeReply


def test_with_no_session_configured_the_chats_go_to_chats_db_by_the_config(make_chat, tmp_path):
    h = make_chat(FakeEngine(), session=None, params={})
    assert f"session: {tmp_path / 'chats.db'}" in h.out.getvalue()
    assert h.app.cursor.params.show() == {}  # "params": {} sets nothing on a new conversation
    assert "echo: kept" in h.run("kept")
    with Session.open(tmp_path / "chats.db") as saved:
        assert [c.title for c in saved.conversations()] == ["kept"]


def test_a_session_the_wrapper_passed_in_stays_open_when_another_is_opened(make_chat, tmp_path):
    given = Session.open(tmp_path / "given.db")
    h = make_chat(FakeEngine(), app_kwargs={"config_path": None, "session": given})
    out = h.run("/engine")
    assert "loaded" in out and "adapters folder" not in out  # no config file: no folder
    h.run("first")
    out = h.run(f"/open {tmp_path / 'other.db'}")
    assert f"session {tmp_path / 'other.db'}" in out
    assert h.app.session.filename == str(tmp_path / "other.db")
    # The wrapper's session is the wrapper's to close; the one the app opened is the app's.
    assert not given.closed
    assert [c.title for c in given.conversations()] == ["first"]
    other = h.app.session
    h.close()
    assert other.closed and not given.closed
    given.close()


def test_a_command_without_a_docstring_and_a_plain_reply_without_reasoning(make_chat):
    import mp13chat

    @mp13chat.command("ping", group="wrapper")
    def ping(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        repl.console.print("pong")

    engine = FakeEngine([FakeReply(text="the answer", reasoning="secret musing")])
    h = make_chat(engine, stream=False, show_reasoning=False)
    h.app.register_command(ping)
    assert h.run("/help ping").strip() == "usage: /ping"  # nothing more to say
    out = h.run("/ping", "question")
    assert "pong" in out
    assert "the answer" in out and "secret musing" not in out  # show_reasoning off
    assert out.count("the answer") == 1


def test_the_readmes_way_to_test_a_wrapper_app_without_a_terminal():
    """README's wrapper section: a scripted engine, a console of one's own, ``execute``."""
    import asyncio
    import io

    import pytest
    from rich.console import Console

    import mp13chat

    @mp13chat.command("greet", group="mine", usage="/greet NAME")
    async def greet(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Greet someone by name."""
        repl.console.print(f"hi {line.require_text('a name')}")

    @mp13chat.command("ping", group="mine")
    def ping(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Answer pong."""
        repl.console.print("pong")

    async def check() -> str:
        out = io.StringIO()
        config = mp13chat.ChatConfig(session=":memory:")
        app = mp13chat.ChatApp(config, engine=FakeEngine(), console=Console(file=out))
        app.register_command(greet)
        app.register_command(mp13chat.group_command("lamp", ping, group="mine", doc="Lamp."))
        await app.start()
        try:
            await app.execute("/greet Ada")
            await app.execute("/lamp ping")
            await app.execute("a message")
            with pytest.raises(mp13chat.UsageError, match="give a name; usage: /greet NAME"):
                await app.execute("/greet")
            with pytest.raises(mp13chat.UsageError, match="made without usage=") as refused:
                await app.execute("/lamp ping loudly")
            assert "usage: /lamp ping" in str(refused.value)
            with pytest.raises(mp13chat.ChatError, match="already registered"):
                app.register_command(mp13chat.command("quit")(lambda repl, line: None))
        finally:
            await app.aclose()
        return out.getvalue()

    out = asyncio.run(check())
    assert "hi Ada" in out and "pong" in out and "echo: a message" in out


def test_unset_restores_a_display_setting_to_the_wrappers_config_not_a_file(make_chat, tmp_path):
    """With the app's own config no file is read; /unset stream used to read the file at
    config_path anyway (or the class defaults) and turn streaming back on."""
    (tmp_path / "config.json").write_text('{"stream": true}')  # e.g. mp13chat's own file
    h = make_chat(FakeEngine(), stream=False)
    out = " ".join(h.run("/set stream on", "/unset stream").split())
    assert "stream back to the config's off" in out
    assert h.app.config.stream is False and h.app.start_config.stream is False


def test_a_wrapper_tool_named_like_a_builtin_fails_the_start_saying_what_the_app_can_do():
    """The toolbox's advice ("unregister it first") is nothing an app can do before start."""
    import asyncio
    import io

    import pytest
    from rich.console import Console

    import mp13chat

    def calculator(expression: str) -> str:
        """The app's own calculator."""
        return "42"

    def started(config, *tools):
        app = mp13chat.ChatApp(
            config, engine=FakeEngine(), console=Console(file=io.StringIO()), tools=tools
        )

        async def go():
            await app.start()
            await app.aclose()
            return app.toolbox

        return asyncio.run(go())

    memory = mp13chat.ChatConfig(session=":memory:")
    with pytest.raises(mp13chat.ChatError, match="'calculator' has the name of a tool") as err:
        started(memory, calculator)
    assert "register_tool(f, name='my_calculator')" in str(err.value)
    assert "ChatConfig(builtin_tools=False)" in str(err.value)
    replaced = started(memory, mp13chat.ToolRegistration(calculator, {"replace": True}))
    assert replaced.get("calculator").description == "The app's own calculator."
    alone = started(mp13chat.ChatConfig(session=":memory:", builtin_tools=False), calculator)
    assert list(alone.names()) == ["calculator"]


def test_a_piped_wrapper_session_runs_sync_async_approved_and_raising_tools(
    monkeypatch, capsys, tmp_path
):
    """README's wrapper section end to end: the app's config and tools, ``main(["-i"])``
    with lines piped in; a tool that raises costs the model one error result, and the
    session goes on."""
    import asyncio
    import sys

    import mp13chat
    from mp13_toolbox import ToolCall
    from tests.chat._stdin import FakeStdin

    def word_count(text: str) -> int:
        """Count the words in a text."""
        return len(text.split())

    async def shout(text: str) -> str:
        """Upper-case a text."""
        await asyncio.sleep(0)
        return text.upper()

    @mp13chat.register_tool(risk="high")
    def wipe(folder: str) -> str:
        """Delete everything in a folder."""
        return f"wiped {folder}"

    def broken(x: int) -> int:
        """Always fails."""
        raise ValueError("broken on purpose")

    def call(name: str, **arguments: object) -> FakeReply:
        return FakeReply(tool_calls=[ToolCall(name, arguments, id=name)])

    engine = FakeEngine(
        [
            call("word_count", text="a b c"),
            "three",
            call("shout", text="hey"),
            "loud",
            call("wipe", folder="/x"),
            "asked",
            call("broken", x=1),
            "went on",
        ]
    )
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", FakeStdin("count\nshout\nwipe\ny\nbreak\n/quit\n"))
    config = mp13chat.ChatConfig(system="You are the app.", session=":memory:")
    app = mp13chat.ChatApp(config, engine=engine, tools=[word_count, shout, wipe, broken])
    assert app.main(["-i"]) == 0
    out = capsys.readouterr().out
    assert "run wipe (high risk)?" in out and "went on" in out
    results = [
        r.messages[-1]["content"] for r in engine.requests if r.messages[-1]["role"] == "tool"
    ]
    assert results == [
        "3",
        "HEY",
        "wiped /x",
        "Tool 'broken' failed: ValueError: broken on purpose",
    ]
    assert all(r.messages[0]["content"] == "You are the app." for r in engine.requests)
    assert not (tmp_path / "config.json").exists()  # the app's config: no file read or made
