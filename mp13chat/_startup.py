# SPDX-License-Identifier: MIT
"""Starting a ``ChatApp``: engine (with a progress display), toolbox, session, cursor.

Only what the app was not given is created, and only that is closed on exit (through
``app.own``). Loading runs in a worker thread so the event loop stays responsive.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from mp13chat import _render as render
from mp13chat._convo import make_context
from mp13chat._model import ModelChoice, is_builtin, resolve_model

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp

SESSION_FILENAME = "chats.db"


async def with_progress(app: ChatApp, label: str, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Run blocking ``func`` in a thread while an indeterminate progress bar runs."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=app.console, transient=True) as progress:
        progress.add_task(label, total=None)
        return await asyncio.to_thread(func, *args, **kwargs)


async def load_engine(app: ChatApp, model: str | None) -> ModelChoice:
    """Resolve ``model`` (building a built-in one if needed) and load it as the engine."""
    from mp13_engine import Engine  # imports torch: only when a real engine is needed

    _quiet_transformers()

    label = "building the built-in model (first run only)" if is_builtin(model) else "resolving"
    choice: ModelChoice = await with_progress(app, label, resolve_model, model)
    engine = await with_progress(
        app, f"loading {choice.label}", Engine.load, choice.path, **app.config.engine
    )
    app.engine = engine
    app.own(engine.aclose)
    return choice


def _quiet_transformers() -> None:
    # transformers' tqdm bars (weight loading, shard writing) would fight with our own
    # progress display on the terminal the REPL owns; this is a process-wide switch,
    # flipped only when the REPL itself loads a model.
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        return
    hf_logging.disable_progress_bar()


def session_path(app: ChatApp) -> str:
    """The session file: the config's ``session``, else ``chats.db`` by the config file."""
    if app.config.session:
        return app.config.session
    folder = app.config_dir
    if folder is None:
        return ":memory:"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / SESSION_FILENAME)


async def start(app: ChatApp) -> None:
    from mp13_context import Session
    from mp13_toolbox import Toolbox

    banner = Text("mp13chat", style="mp13.banner")
    banner.append("  /help for commands, Ctrl+D to quit", style="mp13.info")
    app.console.print(banner)
    demo = False
    if app.engine is None:
        choice = await load_engine(app, app.config.model)
        demo = choice.demo
        app.model_label = choice.label
        render.print_info(app.console, f"model: {choice.label} ({choice.path})")
        if choice.note:
            render.print_warning(app.console, choice.note)
    elif not app.model_label:
        app.model_label = type(app.engine).__name__
    if app.toolbox is None:
        app.toolbox = Toolbox(builtins=app.config.builtin_tools)
    for registration in app.take_pending_tools():
        app.toolbox.register(registration.func, **registration.options)
    approvals = dict(app.config.tool_approvals)
    if not approvals and demo:
        # The demo exists to show the whole loop, approval included.
        approvals = dict.fromkeys(app.toolbox.names(), "ask")
        render.print_info(
            app.console,
            "the demo asks before running a tool; /tools approval NAME allow stops that",
        )
    for name, policy in approvals.items():
        app.toolbox.set_approval(name, policy)
    if app.session is None:
        path = session_path(app)
        app.session = await asyncio.to_thread(Session.open, path)
        app.own(app.session.close)
        if path != ":memory:":
            render.print_info(app.console, f"session: {Path(path)}")
    app.context = make_context(app)
    app.new_conversation()
