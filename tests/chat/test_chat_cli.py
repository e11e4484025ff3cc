# SPDX-License-Identifier: MIT
"""Command line, config file on first run, and wrapper-app tool registration."""

from __future__ import annotations

import json

import pytest

import mp13chat
from mp13chat import ChatApp
from mp13chat._cli import CliOptions, parse_cli


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_cli(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--model", "--session", "--replay", "--config"):
        assert flag in text
    assert "demo model" in text


def test_flags_parse():
    opts = parse_cli(["--model", "m", "--session", "s.db", "--replay", "abc", "--config", "c"])
    assert opts == CliOptions(model="m", session="s.db", replay="abc", config="c")


def test_first_run_creates_the_config_and_flags_override_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    app = ChatApp()
    app.apply_options(CliOptions(model="some/model"))
    assert (tmp_path / "config.json").exists()
    assert app.config.model == "some/model"
    # the file keeps its own value: flags are for this run only
    assert json.loads((tmp_path / "config.json").read_text())["model"] is None


def test_explicit_config_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"stream": False, "system": "Hi."}))
    app = ChatApp()
    app.apply_options(CliOptions(config=str(path)))
    assert app.config.stream is False and app.config.system == "Hi."
    assert app.config_dir == tmp_path


def test_bad_config_file_exits_with_a_clear_message(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"colour": "red"}))
    assert ChatApp().main(["--config", str(path)]) == 2
    assert "colour" in capsys.readouterr().err


def wrapper_lookup(word: str) -> str:
    """Look a word up in the wrapper app's glossary.

    Args:
        word: The word.
    """
    return word.upper()


mp13chat.register_tool(wrapper_lookup, risk="medium")


def test_main_registers_marked_tools_of_the_calling_module(monkeypatch):
    seen = {}

    def fake_main(self, argv=None):
        seen["app"] = self
        seen["argv"] = argv
        return 0

    monkeypatch.setattr(ChatApp, "main", fake_main)

    def extra() -> str:
        """An extra tool."""
        return "x"

    assert mp13chat.main(["--model", "tiny"], tools=[extra]) == 0
    pending = seen["app"].take_pending_tools()
    funcs = [r.func for r in pending]
    assert funcs == [extra, wrapper_lookup]
    assert pending[1].options == {"risk": "medium"}
    assert seen["argv"] == ["--model", "tiny"]


def test_registered_tools_reach_the_toolbox(make_chat):
    from mp13_context.testing import FakeEngine

    h = make_chat(FakeEngine(), app_kwargs={"tools": [wrapper_lookup]})
    assert "wrapper_lookup" in h.app.toolbox
    h.app.register_tool(lambda: "late", name="late_tool")
    assert "late_tool" in h.app.toolbox
    assert h.app.toolbox.get("wrapper_lookup").risk.value == "medium"


def test_public_names_are_pinned():
    assert mp13chat.__all__ == sorted(mp13chat.__all__)
    assert {"main", "register_tool", "ChatApp"} <= set(mp13chat.__all__)
