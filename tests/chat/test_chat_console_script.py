# SPDX-License-Identifier: MIT
"""End to end: the real ``mp13chat`` console script in a pseudo-terminal."""

from __future__ import annotations

import os
import shutil
import sys
import time

import pytest

pexpect = pytest.importorskip("pexpect")


def _command() -> tuple[str, list[str]]:
    script = shutil.which("mp13chat")
    if script is not None:
        return script, []
    return sys.executable, ["-c", "import sys, mp13chat; sys.exit(mp13chat.main())"]


def _expect(child, pattern, timeout=-1):
    """``child.expect`` that, when it fails, shows what the terminal printed."""
    try:
        child.expect(pattern, timeout=timeout)
    except (pexpect.TIMEOUT, pexpect.EOF) as exc:
        pytest.fail(
            f"expected {pattern!r} ({type(exc).__name__}); the terminal showed: "
            f"{(child.before or '')[-3000:]!r}"
        )


@pytest.mark.slow
def test_start_ask_interrupt_a_long_reply_and_quit(tmp_path):
    program, prefix = _command()
    env = dict(
        os.environ,
        MP13_CONFIG_DIR=str(tmp_path / "config"),
        MP13_CACHE=str(tmp_path / "cache"),
        PROMPT_TOOLKIT_NO_CPR="1",
        TERM="xterm",
    )
    child = pexpect.spawn(
        program,
        [*prefix, "--model", "tiny", "--session", ":memory:"],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 120),
    )
    try:
        _expect(child, "random weights")  # the banner says what the tiny model is
        _expect(child, "> ")
        # a reply that cannot end by itself for a long while
        child.sendline("/set min_new_tokens 1900")
        _expect(child, "min_new_tokens = 1900")
        child.sendline("/set max_new_tokens 2000")
        _expect(child, "max_new_tokens = 2000")
        child.sendline("hello")
        _expect(child, "hello")
        # Interrupt early: on a quiet machine the tiny model writes ~1000 tokens/s, and a
        # reply that already ended cannot be cancelled (the one failure of this test).
        time.sleep(0.5)
        child.sendintr()  # Ctrl+C
        _expect(child, r"cancelled \(partial reply kept\)", timeout=30)
        shown = child.before
        _expect(child, "> ")
        # The terminal's echo stays out of the live reply (an echoed ^C made its first
        # line show twice), and the cancellation is said once, not twice.
        assert "^C" not in shown + child.before
        assert "cancelled" not in child.before
        # the REPL is still there and answers commands
        child.sendline("/help quit")
        _expect(child, "usage: /quit")
        child.sendline("/quit")
        _expect(child, pexpect.EOF, timeout=60)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "config" / "config.json").exists()
