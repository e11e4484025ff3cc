# SPDX-License-Identifier: MIT
"""What reaches the screen: library warnings go to the log (mentioned once, listed by
/warnings), and the terminal's echo stays out of a streaming reply."""

from __future__ import annotations

import io
import logging
import os
import sys
import termios
import warnings

from rich.console import Console

from mp13_context import Event, EventKind
from mp13_context.testing import FakeEngine
from mp13chat._logs import LibraryLog, library_log
from mp13chat._oneshot import AnswerView
from mp13chat._terminal import is_terminal, no_echo


def test_library_warnings_go_to_the_log_file_not_the_screen(tmp_path, capfd):
    path = tmp_path / "mp13chat.log"
    root = logging.getLogger()
    handlers_before = list(root.handlers)
    with library_log(path) as log:
        # what bitsandbytes, transformers and PEFT do (the engine itself drops the one
        # bitsandbytes notice that says nothing, "Failed to load CPU gemm_4bit_forward")
        logging.getLogger("bitsandbytes.backends.cpu.ops").warning(
            "CPU kernel for gemv_4bit not found; using the slower path"
        )
        warnings.warn("`is_gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1)
        logging.getLogger("peft.tuners").info("an info record stays out")
    out, err = capfd.readouterr()
    assert "gemv_4bit" not in out + err and "deprecated" not in out + err
    text = path.read_text()
    assert "gemv_4bit" in text and "is_gradient_checkpointing" in text
    assert "info record" not in text
    assert log.total == 2 and [r.name for r in log.records] == [
        "bitsandbytes.backends.cpu.ops",
        "py.warnings",
    ]
    # everything is as it was afterwards
    assert root.handlers == handlers_before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("after the block", UserWarning, stacklevel=1)
    assert len(caught) == 1  # warnings are warnings again, not log records


def test_the_repl_mentions_the_log_once_and_lists_it_with_warnings(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.app.library_log = LibraryLog(tmp_path / "mp13chat.log")
    logger = logging.getLogger("transformers.generation")
    record = logger.makeRecord(logger.name, logging.WARNING, "", 0, "a flag is ignored", (), None)
    h.app.library_log.handle(record)
    out = h.run("hello", "again")
    assert out.count("library warnings go to /warnings") == 1
    assert "a flag is ignored" in out
    out = h.run("/warnings")
    assert "transformers.generation" in out and "a flag is ignored" in out
    assert str(tmp_path / "mp13chat.log") in out


def test_warnings_without_any(make_chat):
    h = make_chat(FakeEngine())
    assert "no library warnings in this run" in h.run("/warnings")


def test_no_echo_turns_the_terminal_echo_off_and_restores_it():
    """Ctrl+C echoed as ^C after a full-width line of the live markdown area wrapped onto
    a new line: the area's erase then missed a line and the reply's first line stayed
    on screen twice. Echo is off while a reply runs."""
    leader, follower = os.openpty()
    try:
        stream = os.fdopen(follower, "r", closefd=False)
        before = termios.tcgetattr(follower)
        assert before[3] & termios.ECHO
        with no_echo(stream) as changed:
            assert changed
            inside = termios.tcgetattr(follower)
            assert not inside[3] & termios.ECHO and not inside[3] & termios.ECHOCTL
        assert termios.tcgetattr(follower) == before
    finally:
        os.close(leader)
        os.close(follower)


def test_no_echo_leaves_pipes_and_missing_streams_alone(tmp_path):
    with no_echo(None) as changed:
        assert not changed
    with open(tmp_path / "f", "w") as stream, no_echo(stream) as changed:
        assert not changed
    with no_echo(sys.stdin) as changed:  # pytest's stdin is no terminal
        assert not changed or sys.stdin.isatty()


def test_no_echo_leaves_a_stream_alone_that_claims_a_terminal_it_is_not(tmp_path):
    class Claims:  # e.g. a wrapper's stdin proxy: says tty, its descriptor is a file
        def __init__(self, stream):
            self.stream = stream

        def fileno(self):
            return self.stream.fileno()

        def isatty(self):
            return True

    with open(tmp_path / "f", "w") as stream, no_echo(Claims(stream)) as changed:
        assert not changed


def test_is_terminal_is_false_for_what_is_not_one_and_never_raises(tmp_path):
    # The one-shot answer asked out.isatty() itself, so a closed stream raised there.
    closed = open(tmp_path / "f", "w")  # noqa: SIM115 - closed on purpose
    closed.close()

    class NoIsatty:  # a wrapper's own stream object
        def write(self, text: str) -> int:
            return len(text)

    assert not is_terminal(closed)
    assert not is_terminal(NoIsatty())  # type: ignore[arg-type]
    assert not is_terminal(io.StringIO())
    with open(tmp_path / "g", "w") as stream:
        assert not is_terminal(stream)


def test_a_one_shot_answer_goes_raw_to_a_stream_that_cannot_say_it_is_a_terminal():
    class Unsure(io.StringIO):  # isatty raised from AnswerView's constructor
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    out = Unsure()
    view = AnswerView(Console(file=io.StringIO()), out, stream=True)
    view(Event(kind=EventKind.TEXT, text="red \x1b[31mtext"))
    view.end_line()
    assert out.getvalue() == "red \x1b[31mtext\n"  # piped data: as the model wrote it


def test_echo_is_off_while_the_model_loads(tmp_path, monkeypatch):
    """Ctrl+C while the model loaded echoed ^C after the full-width progress bar: at 40
    columns it wrapped, and the bar's erase left a stale "loading ..." line above
    "mp13chat: interrupted". Echo is off while the model is chosen and loaded."""
    import asyncio

    from mp13chat import ChatApp, ChatConfig, _startup

    leader, follower = os.openpty()
    seen: list[bool] = []

    def echo_on() -> bool:
        return bool(termios.tcgetattr(follower)[3] & termios.ECHO)

    real_choose = _startup.choose_model

    async def choose(*args, **kwargs):
        seen.append(echo_on())
        return await real_choose(*args, **kwargs)

    real_load = _startup.load_engine

    async def load(*args, **kwargs):
        seen.append(echo_on())
        return await real_load(*args, **kwargs)

    monkeypatch.setattr(_startup, "choose_model", choose)
    monkeypatch.setattr(_startup, "load_engine", load)
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    try:
        monkeypatch.setattr(sys, "stdin", os.fdopen(follower, "r", closefd=False))
        app = ChatApp(
            ChatConfig(model="tiny", session=":memory:"), console=Console(file=io.StringIO())
        )
        asyncio.run(app.start())
        assert seen == [False, False]
        assert echo_on()  # and back on for the prompt
        asyncio.run(app.aclose())
    finally:
        os.close(leader)
        os.close(follower)
