# SPDX-License-Identifier: MIT
"""Commands are written against ``Repl``, not ``ChatApp``: the app must offer every
member of the protocol, and engine-only features fail clearly on another engine."""

from __future__ import annotations

import inspect

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
