# SPDX-License-Identifier: MIT
"""Commands are written against ``Repl``, not ``ChatApp``: the app must offer every
member of the protocol, and engine-only features fail clearly on another engine."""

from __future__ import annotations

import inspect

import pytest

from mp13_context.testing import FakeEngine
from mp13chat._registry import CommandRegistry
from mp13chat._repl import Repl


def _members() -> list[str]:
    functions = [n for n, v in vars(Repl).items() if not n.startswith("_") and callable(v)]
    properties = [n for n, v in vars(Repl).items() if isinstance(v, property)]
    return sorted({*Repl.__annotations__, *functions, *properties})


def test_the_app_offers_every_member_of_the_repl_protocol(make_chat):
    h = make_chat(FakeEngine())
    members = _members()
    assert {"console", "cursor", "session", "real_engine", "ask_user", "adapters_dir"} <= set(
        members
    )
    missing = [name for name in members if not hasattr(h.app, name)]
    assert not missing, f"ChatApp lacks {missing}"
    for name in ("real_engine", "new_conversation", "open_session", "ask_user"):
        ours = inspect.signature(getattr(Repl, name)).parameters
        theirs = inspect.signature(getattr(type(h.app), name)).parameters
        assert list(ours) == list(theirs), name


def test_the_registry_knows_nothing_of_the_app():
    import mp13chat._registry as registry_module

    source = inspect.getsource(registry_module)
    assert "ChatApp" not in source and "_app" not in source
    assert CommandRegistry().parse  # usable with no app at all


def test_engine_status_on_another_engine_shows_what_it_knows(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/engine", "/metrics")
    assert "FakeEngine" in out  # the loaded row
    assert "this engine (FakeEngine) does not support metrics" in out


def test_a_wrapper_apps_command_works_through_the_repl_protocol(make_chat):
    import mp13chat

    @mp13chat.command("where", group="wrapper", usage="/where [NOTE]")
    def where(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Say which conversation this is, and log a note on the branch."""
        repl.cursor.log(line.text or "no note")
        repl.console.print(f"in {repl.cursor.conversation_id} with {repl.model_label}")

    h = make_chat(FakeEngine())
    h.app.register_command(where)
    out = h.run("/where checked", "/help where")
    assert f"in {h.app.cursor.conversation_id} with FakeEngine" in out
    assert "Say which conversation this is" in out
    notes = [c.text for n in h.app.cursor.path() for c in n.commands if c.kind.value == "log"]
    assert notes == ["checked"]


def test_a_wrapper_apps_group_command_errors_and_recorded_calls(make_chat):
    import mp13chat

    @mp13chat.command("on", group="wrapper")
    def lamp_on(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Switch the lamp on (and record the call on the branch)."""
        repl.cursor.record_call("lamp.on", brightness=3)

    @mp13chat.command("off", group="wrapper")
    def lamp_off(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Switch the lamp off."""
        raise RuntimeError("the lamp is stuck")

    h = make_chat(FakeEngine())
    h.app.register_command(mp13chat.group_command("lamp", lamp_on, lamp_off, group="x", doc="."))
    assert "no error so far" in h.run("/error")
    out = h.run("/lamp", "/lamp off", "/lamp on")
    assert "error: /lamp needs a subcommand: on, off; usage: /lamp on|off ..." in out
    assert "error: RuntimeError: the lamp is stuck" in out  # not ours: its type is named
    assert "RuntimeError: the lamp is stuck" in h.run("/error")  # with the traceback
    h.app.cursor.log("checked the lamp")
    assert "call lamp.on; note 'checked the lamp'" in h.run("/tree")
    # a registry parses commands only: plain text is the app's to send
    with pytest.raises(mp13chat.UsageError, match="a command starts with / followed by its name"):
        h.app.commands.parse("lamp on")


def test_tools_registered_on_the_app_before_it_starts_reach_the_toolbox(tmp_path):
    import asyncio
    import io

    from rich.console import Console

    from mp13chat import ChatApp, ChatConfig

    def lamp_state() -> str:
        """Whether the lamp is on."""
        return "on"

    app = ChatApp(
        ChatConfig(session=":memory:"),
        config_path=tmp_path / "config.json",
        engine=FakeEngine(),
        console=Console(file=io.StringIO()),
    )
    assert app.register_tool(lamp_state, risk="high") is lamp_state
    assert app.toolbox is None  # not started: kept until start

    async def started() -> str:
        await app.start()
        try:
            return app.toolbox.get("lamp_state").risk.value
        finally:
            await app.aclose()

    assert asyncio.run(started()) == "high"


def _app_in_code(tmp_path, config, **kwargs):
    import io

    from rich.console import Console

    from mp13chat import ChatApp

    console = Console(file=io.StringIO(), width=200)
    return ChatApp(config, engine=FakeEngine(), console=console, **kwargs), console.file


def test_an_app_built_in_code_without_a_config_file_keeps_nothing(tmp_path, monkeypatch):
    import asyncio

    from mp13chat import ChatConfig

    monkeypatch.chdir(tmp_path)
    app, out = _app_in_code(tmp_path, ChatConfig())

    async def chat() -> str:
        await app.start()
        try:
            return app.session.filename
        finally:
            await app.aclose()

    assert asyncio.run(chat()) == ":memory:"
    assert app.adapters_dir is None
    assert list(tmp_path.iterdir()) == []  # no session, history or log file anywhere
    assert "session:" not in out.getvalue()


def test_a_start_that_fails_for_another_reason_suggests_no_model(tmp_path):
    import asyncio

    from mp13chat import ChatConfig

    not_a_file = tmp_path / "folder.db"
    not_a_file.mkdir()
    app, out = _app_in_code(tmp_path, ChatConfig(session=str(not_a_file)))
    assert asyncio.run(app.run_async()) == 1
    text = " ".join(out.getvalue().split())
    assert "error:" in text and "folder.db" in text
    assert "knows by name" not in text  # model names only when the model was not found


def test_aclose_stops_background_work_and_closes_the_rest_when_one_close_fails(make_chat):
    import asyncio

    h = make_chat(FakeEngine())
    closed: list[str] = []

    def failing_close() -> None:
        raise RuntimeError("the lamp's socket is stuck")

    async def remember_close() -> None:
        closed.append("lamp log")

    async def forever() -> None:
        await asyncio.sleep(3600)

    h.app.own(remember_close)
    h.app.own(failing_close)  # closed first: newest first
    task = h.call(_started_in_background(h.app, forever()))
    h.close()
    assert task.cancelled()
    assert closed == ["lamp log"]
    assert h.app.session.closed
    assert "error: RuntimeError: the lamp's socket is stuck" in h.out.getvalue()


async def _started_in_background(app, work):
    return app.background(work)
