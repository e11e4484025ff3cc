# SPDX-License-Identifier: MIT
"""A harness that drives ``mp13chat.ChatApp`` with prompt-toolkit pipe input.

``ChatHarness.run(*lines)`` types the lines (each followed by Enter) plus ``/quit``
into the app's prompt and runs the loop on one ``asyncio.Runner`` that lives for the
whole test, so the app's state (cursor, session, toolbox) persists between calls and
can be inspected. Output goes to a rich ``Console`` writing to a ``StringIO``;
``run`` returns what that call printed. Config, history and session live in
``tmp_path`` (``MP13_CONFIG_DIR``).
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from mp13chat import ChatApp, ChatConfig
from mp13chat._style import make_theme

QUIT_REFUSED = "/quit again (or Ctrl+D) leaves anyway"  # what a refused /quit ends with


class ChatHarness:
    def __init__(self, tmp_path: Path, engine: Any, config: ChatConfig, **app_kwargs: Any) -> None:
        self.tmp_path = tmp_path
        self.out = io.StringIO()
        self.console = Console(file=self.out, theme=make_theme(), width=140, color_system=None)
        self._pipe_cm = create_pipe_input()
        self.input = self._pipe_cm.__enter__()
        self.runner: asyncio.Runner | None = asyncio.Runner()
        kwargs = dict(
            config_path=tmp_path / "config.json",
            engine=engine,
            console=self.console,
            input=self.input,
            output=DummyOutput(),
        )
        self.app = ChatApp(config, **{**kwargs, **app_kwargs})
        self.runner.run(self.app.start())

    def run(
        self,
        *lines: str,
        timeout: float = 30.0,
        quit: bool = True,
        interrupt_after: float | None = None,
        interrupt_when: Any = None,
    ) -> str:
        """Type ``lines`` (and /quit), run the loop until it ends; return the new output.

        ``interrupt_after``: send this process a real SIGINT (what Ctrl+C does in a
        terminal while a reply runs) that many seconds after the loop starts, or after
        ``interrupt_when()`` first returns true (polled every 50 ms).

        A /quit refused because a training job still runs (the app asks for a second
        one) gets that second /quit, so a test that leaves a job running still ends.
        """
        start = len(self.out.getvalue())
        text = "".join(line + "\r" for line in (*lines, *(["/quit"] if quit else [])))
        self.input.send_text(text)

        async def drive() -> None:
            if interrupt_after is not None:
                loop = asyncio.get_running_loop()
                loop.call_later(interrupt_after, os.kill, os.getpid(), signal.SIGINT)
            poller = None
            if interrupt_when is not None:

                async def poll() -> None:
                    while not interrupt_when():
                        await asyncio.sleep(0.05)
                    os.kill(os.getpid(), signal.SIGINT)

                poller = asyncio.ensure_future(poll())
            confirm = asyncio.ensure_future(self._confirm_quit(start)) if quit else None
            try:
                await asyncio.wait_for(self.app.loop(), timeout)
            finally:
                for task in (poller, confirm):
                    if task is not None:
                        task.cancel()

        self.runner.run(drive())
        return self.out.getvalue()[start:]

    async def _confirm_quit(self, start: int) -> None:
        while QUIT_REFUSED not in " ".join(self.out.getvalue()[start:].split()):
            await asyncio.sleep(0.05)
        self.input.send_text("/quit\r")

    def call(self, coro: Any) -> Any:
        return self.runner.run(coro)

    def close(self) -> None:
        if self.runner is None:
            return
        try:
            self.runner.run(self.app.aclose())
        finally:
            self.runner.close()
            self.runner = None
            self._pipe_cm.__exit__(None, None, None)


@pytest.fixture
def make_chat(tmp_path, monkeypatch):
    """``make_chat(engine, **config_fields) -> ChatHarness`` (closed after the test)."""
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    made: list[ChatHarness] = []

    def make(engine: Any, app_kwargs: dict[str, Any] | None = None, **fields: Any) -> ChatHarness:
        fields.setdefault("session", str(tmp_path / f"chats{len(made)}.db"))
        harness = ChatHarness(tmp_path, engine, ChatConfig(**fields), **(app_kwargs or {}))
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
