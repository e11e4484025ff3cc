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


@pytest.mark.slow
def test_start_ask_interrupt_a_long_reply_and_quit(tmp_path):
    program, prefix = _command()
    env = dict(
        os.environ,
        MP13_CONFIG_DIR=str(tmp_path / "config"),
        MP13_CACHE_DIR=str(tmp_path / "cache"),
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
        child.expect("random weights")  # the banner says what the tiny model is
        child.expect("> ")
        # a reply that cannot end by itself for a long while
        child.sendline("/set min_new_tokens 1500")
        child.expect("min_new_tokens = 1500")
        child.sendline("/set max_new_tokens 1600")
        child.expect("max_new_tokens = 1600")
        child.sendline("hello")
        child.expect("hello")
        time.sleep(1.5)  # the reply is streaming now (1500 tokens take far longer)
        child.sendintr()  # Ctrl+C
        child.expect("cancelled", timeout=30)
        child.expect("> ")
        # the REPL is still there and answers commands
        child.sendline("/help quit")
        child.expect("usage: /quit")
        child.sendline("/quit")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "config" / "config.json").exists()
