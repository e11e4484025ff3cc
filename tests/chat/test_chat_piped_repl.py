# SPDX-License-Identifier: MIT
"""``mp13chat -i`` with piped input: the REPL reads the pipe line by line.

Driven through ``ChatApp.main`` with a FakeEngine and a piped standard input. The lines
are read as they are (not as keystrokes), each shown after the prompt, and every line
runs, also those that arrive together with the end of the input."""

from __future__ import annotations

import json
import sys

from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall
from mp13chat import ChatApp
from tests.chat._stdin import FakeStdin


def _run(monkeypatch, capsys, tmp_path, stdin, engine):
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", FakeStdin(stdin))
    status = ChatApp(engine=engine).main(["-i", "--session", ":memory:"])
    return status, capsys.readouterr().out


def test_every_piped_line_runs_and_the_transcript_shows_it(monkeypatch, capsys, tmp_path):
    engine = FakeEngine()
    # no /quit and no final newline: the last line comes with the end of the input
    status, out = _run(monkeypatch, capsys, tmp_path, "hello\n/tokens\nbye", engine)
    assert status == 0
    assert [r.messages[-1]["content"] for r in engine.requests] == ["hello", "bye"]
    assert "> hello\n" in out and "echo: hello" in out
    assert "> /tokens\n" in out and "> bye\n" in out and "echo: bye" in out


def test_an_escape_byte_in_a_piped_line_is_text_not_a_key(monkeypatch, capsys, tmp_path):
    engine = FakeEngine()
    status, out = _run(monkeypatch, capsys, tmp_path, "\x1b[31mred\n/quit\n", engine)
    assert status == 0
    assert engine.requests[-1].messages[-1]["content"] == "\x1b[31mred"
    assert "\x1b" not in out  # shown, not obeyed, by the app's console
    assert "echo: " in out


def test_a_tool_approval_is_answered_by_the_next_piped_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"tool_approvals": {"calculator": "ask"}}))
    call = ToolCall("calculator", {"expression": "17*23"}, id="c1")
    engine = FakeEngine([FakeReply(tool_calls=[call]), "It is 391."])
    status, out = _run(monkeypatch, capsys, tmp_path, "what is 17*23?\ny\n/quit\n", engine)
    assert status == 0
    assert "run calculator" in out and "It is 391." in out
    tool_message = engine.requests[-1].messages[-1]
    assert tool_message["role"] == "tool" and "391" in tool_message["content"]
