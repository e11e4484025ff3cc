# SPDX-License-Identifier: MIT
"""The README's self-contained Python blocks run as written, in the order a reader meets
them: the engine's first block on a tiny offline model (its model path is the one thing
changed), the others on mp13_context's scripted engine where a block uses an ``engine``.

Blocks are found by their first line, so a block that is reworded still runs; one that is
removed or renamed fails the lookup, which says which. The blocks share one namespace, as
a reader's session would: the conversation block uses the toolbox ``tb`` built above it."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

import mp13chat
from mp13_context.testing import FakeEngine

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _block(first_line: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"one README python block should start with {first_line!r}"
    return found[0]


def test_the_engine_block_runs_as_written_on_a_tiny_model(tmp_path, capsys):
    from mp13_engine import FinishReason
    from mp13_engine.testing import build_tiny_model

    model = build_tiny_model(tmp_path / "model", family="chatml")
    block = _block("from mp13_engine import Engine, Request")
    assert block.count('"path/to/model"') == 1
    ns: dict[str, Any] = {}
    exec(block.replace('"path/to/model"', repr(str(model))), ns)
    assert ns["resp"].finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert len(ns["replies"]) == len(ns["prompts"]) == 3
    assert ns["future"].result(timeout=60).finish_reason is FinishReason.CANCELLED
    assert "EngineMetrics(" in capsys.readouterr().out


def test_tools_and_conversation_blocks_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the conversation block opens "chats.db" where it runs
    ns: dict[str, Any] = {"engine": FakeEngine(), "other_engine": FakeEngine()}
    exec(_block("from mp13_toolbox import"), ns)
    assert ns["result"].content == "5" and not ns["result"].is_error
    assert [s["function"]["name"] for s in ns["specs"]] == ["add"]

    exec(_block("from mp13_context import"), ns)
    assert len(ns["kids"]) == 3
    assert ns["report"].turns and ns["report"].turns[0].user_text == "Hi"
    assert (tmp_path / "chats.db").is_file()
    ns["session"].close()


def test_repl_wrapper_blocks_run_as_written(monkeypatch):
    started: list[Any] = []
    monkeypatch.setattr(mp13chat, "main", lambda **kw: started.append(kw))
    monkeypatch.setattr(mp13chat.ChatApp, "main", lambda self, *a: started.append(self))
    ns: dict[str, Any] = {}
    exec(_block("import mp13chat"), ns)
    assert started == [{"tools": [ns["lookup"]]}]

    exec(_block('@mp13chat.command("greet"'), ns)
    assert started[-1] is ns["app"]
    with pytest.raises(mp13chat.ChatError):  # a built-in's name is refused, as the text says
        ns["app"].register_command(mp13chat.command("help")(lambda repl, line: None))

    exec(_block("import asyncio, io"), ns)  # ends in its own assert "hi Ada"
