# SPDX-License-Identifier: MIT
"""``Repl``: what a slash command may touch, and ``QuitRequested``.

Commands (``_cmd_*``) and the helpers they share (``_position``, ``_reply``) are written
against this protocol, never against ``ChatApp``, so the modules form layers: the
registry knows nothing of the app, commands know only this protocol, and ``_app`` (which
implements it) wires them together at the top.

What a command may touch: the console it prints on, the run's config (it replaces it
for display settings), the session, context, current cursor (it replaces it to move
to a fork, a try-out or another conversation), the engine and the toolbox, plus a few
services of the app (a new conversation, another session file, background work, an
inline question). Everything else — the loop, Ctrl+C, start and shutdown, what the app
owns and closes — stays inside the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from mp13_context import ChatContext, Cursor, EngineClient, Session
    from mp13_engine import Engine, TrainingJob
    from mp13_toolbox import Toolbox
    from mp13chat._config import ChatConfig
    from mp13chat._logprobs import LogprobsState
    from mp13chat._logs import LibraryLog
    from mp13chat._registry import CommandRegistry


class QuitRequested(Exception):  # a control-flow signal, not an error
    """Raised by a command (``/quit``) to leave the loop with status 0."""


class Repl(Protocol):
    """The part of a running REPL a command works with (see the module docstring)."""

    console: Console
    config: ChatConfig
    #: The config as this run started (the file's, or the one the app was given, flags
    #: applied): what ``/unset`` restores a display setting to.
    start_config: ChatConfig
    #: The config file's place; its folder holds history, session, adapters and log.
    config_path: Path | None
    #: Where ``config`` came from, as /config titles it: the file read, the wrapper
    #: app's own ``ChatConfig`` or the defaults (``+ command-line flags`` when flags
    #: changed it).
    config_source: str
    commands: CommandRegistry[Repl]
    engine: EngineClient  # any engine; ``real_engine`` for what only mp13's offers
    session: Session
    context: ChatContext
    cursor: Cursor
    toolbox: Toolbox
    model_label: str
    #: What ``/error`` shows: the traceback of the newest error, a command's or a failed
    #: tool's (with the tool's name and arguments).
    last_traceback: str | None
    library_log: LibraryLog | None
    #: The log-probabilities of this run's replies made with ``logprobs`` on (what
    #: ``/logprobs`` shows; the session does not store them).
    reply_logprobs: LogprobsState
    training_job: TrainingJob | None  # the last job /train started in this run
    training_announcer: asyncio.Task[Any] | None  # will say when that job ends

    @property
    def adapters_dir(self) -> Path | None:
        """Where ``/train`` saves and which adapters load at start (``_adapter_folder``)."""
        ...

    def real_engine(self, feature: str) -> Engine:
        """The loaded ``mp13_engine.Engine``; a ``ChatError`` naming ``feature`` when the
        engine is another client (a scripted fake) that lacks it."""
        ...

    def new_conversation(self) -> Cursor:
        """Move to a new conversation with the config's system message and parameters."""
        ...

    def open_session(self, path: str) -> None:
        """Make the session file at ``path`` current (at its latest conversation)."""
        ...

    def background(self, work: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run ``work`` beside the loop (its output appears above the prompt)."""
        ...

    def cancel_reported(self) -> None:
        """The running command has told the user it was cancelled: no second line."""
        ...

    async def ask_user(self, question: str) -> str:
        """One inline question on the prompt line; Ctrl+C/Ctrl+D answer ``""``."""
        ...
