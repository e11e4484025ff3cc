# SPDX-License-Identifier: MIT
"""One-shot mode: ``mp13chat -p QUESTION`` and piped input print the answer and exit.

Driven through ``ChatApp.main`` (the console script's own path) with a FakeEngine; the
answer must be the only thing on standard output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall
from mp13chat import ChatApp
from tests.chat._stdin import FakeStdin


@pytest.fixture
def run_main(tmp_path, monkeypatch, capsys):
    """``run_main(argv, engine=None, stdin="") -> (status, stdout, stderr)``."""
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))

    def run(argv, engine=None, stdin="", tty=False):
        monkeypatch.setattr(sys, "stdin", FakeStdin(stdin, tty))
        status = ChatApp(engine=engine).main(argv)
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_dash_p_prints_only_the_answer(run_main, tmp_path):
    engine = FakeEngine()
    status, out, err = run_main(["-p", "hello there"], engine, tty=True)
    assert status == 0
    assert out == "echo: hello there\n"
    assert "/help" not in err and "mp13chat" not in err  # no banner
    # nothing is recorded without --session
    assert not (tmp_path / "chats.db").exists()


def test_piped_input_is_the_question(run_main):
    status, out, _ = run_main([], FakeEngine(), stdin="what is 17*23?\n")
    assert (status, out) == (0, "echo: what is 17*23?\n")
    status, out, _ = run_main(["-p", "-"], FakeEngine(), stdin="from a pipe")
    assert (status, out) == (0, "echo: from a pipe\n")
    status, out, _ = run_main(["-p", "summarize:"], FakeEngine(), stdin="a b c")
    assert (status, out) == (0, "echo: summarize:\n\na b c\n")


def test_a_failed_answer_exits_1_with_the_error_on_stderr(run_main):
    engine = FakeEngine([FakeReply(error="the model fell over")])
    status, out, err = run_main(["-p", "hi"], engine, tty=True)
    assert status == 1
    assert out == ""
    assert "error: the model fell over" in err


def test_a_tool_needing_approval_is_refused_with_a_way_to_allow_it(run_main, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"tool_approvals": {"calculator": "ask"}}))
    call = ToolCall("calculator", {"expression": "17*23"}, id="c1")
    engine = FakeEngine([FakeReply(tool_calls=[call]), "I may not use it."])
    status, out, err = run_main(["-p", "what is 17*23?"], engine, tty=True)
    assert status == 0
    assert out == "I may not use it.\n"
    assert "calculator" in err and "cannot ask" in err and '"calculator": "allow"' in err
    tool_message = engine.requests[-1].messages[-1]
    assert tool_message["role"] == "tool" and "391" not in tool_message["content"]


def test_a_cut_answer_says_how_to_allow_a_longer_one(run_main):
    from mp13_engine import FinishReason

    engine = FakeEngine([FakeReply(text="partial", finish_reason=FinishReason.LENGTH)])
    status, out, err = run_main(["-p", "hi", "--max-new-tokens", "3"], engine, tty=True)
    assert (status, out) == (0, "partial\n")
    assert "--max-new-tokens" in err
    assert engine.requests[-1].max_new_tokens == 3


def test_session_flag_records_the_one_shot_exchange(run_main, tmp_path):
    from mp13_context import Session

    db = tmp_path / "kept.db"
    status, _, _ = run_main(["-p", "keep me", "--session", str(db)], FakeEngine(), tty=True)
    assert status == 0
    with Session.open(db) as session:
        assert session.search("keep")
        assert [c.title for c in session.conversations()] == ["keep me"]


def test_a_failed_start_exits_1_and_names_no_repl_command(run_main, tmp_path):
    missing = str(tmp_path / "no-such-model")
    status, out, err = run_main(["-p", "hi", "--model", missing], tty=True)
    assert status == 1 and out == ""
    assert "error:" in err and "no-such-model" in err
    assert "/error" not in err  # the REPL is not running: no command can be typed
    assert "traceback is in" in err and (tmp_path / "mp13chat.log").exists()


@pytest.mark.slow
def test_console_script_one_shot_on_the_tiny_model(tmp_path):
    env = dict(
        os.environ,
        MP13_CONFIG_DIR=str(tmp_path / "config"),
        MP13_CACHE=str(tmp_path / "cache"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "mp13chat", "--model", "tiny", "--max-new-tokens", "5", "-p", "hi"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and done.stdout.strip()
    assert "random weights" not in done.stdout + done.stderr  # no banner, no notes
    failed = subprocess.run(
        [sys.executable, "-m", "mp13chat", "--model", str(tmp_path / "nothing"), "-p", "hi"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert "error:" in failed.stderr


def test_an_answer_not_streamed_is_printed_once(run_main, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"stream": False}))
    status, out, _ = run_main(["-p", "hello there"], FakeEngine(), tty=True)
    assert (status, out) == (0, "echo: hello there\n")


def test_an_engine_that_raises_exits_1_with_its_error(run_main):
    engine = FakeEngine([FakeReply(raise_exc=RuntimeError("the GPU fell off the bus"))])
    status, out, err = run_main(["-p", "hi"], engine, tty=True)
    assert (status, out) == (1, "")
    assert "the GPU fell off the bus" in err


def test_the_repl_from_main_a_failed_start_and_ctrl_c_while_starting(
    run_main, tmp_path, monkeypatch
):
    status, out, _ = run_main(["--model", str(tmp_path / "no-such-model")], tty=True)
    out = " ".join(out.split())
    assert status == 1  # the REPL never started
    assert "no-such-model' does not exist" in out
    assert "models mp13chat knows by name: demo, tiny" in out

    async def interrupted(self):
        raise KeyboardInterrupt  # what Ctrl+C while the model loads does

    monkeypatch.setattr(ChatApp, "start", interrupted)
    status, _, err = run_main([], FakeEngine(), tty=True)
    assert status == 130
    assert "mp13chat: interrupted" in err


def test_python_dash_m_mp13chat_is_the_console_script(monkeypatch, capsys):
    import runpy

    monkeypatch.setattr(sys, "argv", ["mp13chat", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("mp13chat", run_name="__main__")
    assert exit_.value.code == 0
    assert "--model" in capsys.readouterr().out


def test_a_parameter_the_engine_refuses_is_a_config_error_with_status_2(run_main, tmp_path):
    # Checked when the config loads (ChatApp.main: 2 = bad flags or config), naming the file.
    (tmp_path / "config.json").write_text(json.dumps({"params": {"top_p": 5.0}}))
    engine = FakeEngine()
    status, out, err = run_main(["-p", "hi"], engine, tty=True)
    assert (status, out) == (2, "")
    said = " ".join(err.split())
    assert f"bad config file {tmp_path / 'config.json'}: params:" in said
    assert "top_p=5.0; top_p must be a number in (0, 1]" in said
    assert engine.requests == []  # nothing was sent


def test_a_session_that_cannot_record_ends_the_answer_with_status_1(run_main, tmp_path):
    import sqlean

    from mp13_context import Session

    db = tmp_path / "full.db"
    Session.open(db).close()
    conn = sqlean.connect(str(db))  # recording a turn fails, as on a full disk
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON nodes WHEN NEW.turn IS NOT NULL "
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    conn.commit()
    conn.close()
    engine = FakeEngine()
    status, out, err = run_main(["-p", "hi", "--session", str(db)], engine, tty=True)
    assert (status, out) == (1, "")
    err = " ".join(err.split())
    assert "error: could not record the user turn (saving to " in err
    assert "failed: database or disk is full; make room on the disk" in err
    assert "); nothing of it was recorded" in err
    assert engine.requests == []  # nothing was asked of the model
