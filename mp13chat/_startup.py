# SPDX-License-Identifier: MIT
"""Starting a ``ChatApp``: engine (with a progress display), toolbox, session, adapters,
cursor.

Only what the app was not given is created, and only that is closed on exit (through
``app.own``). Loading runs in a worker thread so the event loop stays responsive. A
named real model is fetched first with its own progress bar (``_fetch``). After the
engine, the adapters saved in the app's adapters folder for this model are loaded
again (``_adapter_folder``). An interactive start prints a short banner: the model
with its resolved device and dtype (the path is in ``/engine``), its note, the
adapters found; a one-shot run (``app.interactive`` false) prints none of it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from mp13chat import _adapter_folder as folder
from mp13chat import _render as render
from mp13chat._convo import make_context
from mp13chat._fetch import FetchDisplay
from mp13chat._model import (
    ModelChoice,
    catalog_names,
    engine_catalog,
    is_builtin,
    is_named,
    resolve_model,
)

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp

SESSION_FILENAME = "chats.db"


async def with_progress(app: ChatApp, label: str, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Run blocking ``func`` in a thread while an indeterminate progress bar runs (on a
    terminal; elsewhere a progress display would only leave blank lines behind)."""
    if not app.console.is_terminal:
        return await asyncio.to_thread(func, *args, **kwargs)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=app.console, transient=True) as progress:
        progress.add_task(label, total=None)
        return await asyncio.to_thread(func, *args, **kwargs)


async def choose_model(app: ChatApp, model: str | None) -> ModelChoice:
    """Resolve ``model``: fetch a named real model (progress bar), build a built-in one."""
    catalog = app.model_catalog if app.model_catalog is not None else engine_catalog()
    if is_named(model, catalog):
        assert model is not None
        with FetchDisplay(app.console, model) as display:
            choice = await asyncio.to_thread(
                resolve_model, model, catalog=catalog, progress=display
            )
        if display.fetched:
            render.print_ok(app.console, f"{model} fetched into {choice.path}")
        return choice
    label = "building the built-in model (first run only)" if is_builtin(model) else "resolving"
    return await with_progress(app, label, resolve_model, model, catalog=catalog)


def engine_fields(app: ChatApp) -> dict[str, Any]:
    """The ``EngineConfig`` fields the app loads its model with (the config's ``engine``
    plus the adapters folder, so short adapter names resolve there)."""
    fields = dict(app.config.engine)
    if app.adapters_dir is not None:
        fields.setdefault("adapters_dir", str(app.adapters_dir))
    return fields


async def load_engine(app: ChatApp, model: str | None) -> ModelChoice:
    """Resolve ``model`` and load it as the app's engine."""
    from mp13_engine import Engine  # imports torch: only when a real engine is needed

    if app.library_log is not None:
        app.library_log.route_transformers()
    else:
        _no_transformers_bars()
    choice = await choose_model(app, model)
    engine = await with_progress(
        app, f"loading {choice.label}", Engine.load, choice.path, **engine_fields(app)
    )
    app.engine = engine
    app.own(engine.aclose)
    return choice


def _no_transformers_bars() -> None:
    # transformers' tqdm bars (weight loading, shard writing) would fight with our own
    # progress display on the terminal the REPL owns.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def engine_summary(engine: Any) -> str:
    """``cpu · float32`` (plus the quantization): where and how the model really runs."""
    parts = [str(engine.device)] if getattr(engine, "device", None) else []
    dtype = resolved_dtype(engine)
    if dtype:
        parts.append(dtype)
    quantization = getattr(getattr(engine, "config", None), "quantization", None)
    if quantization:
        parts.append(quantization)
    return " · ".join(parts)


def resolved_dtype(engine: Any) -> str | None:
    """The dtype the loaded weights compute in (``float32``), not the configured ``auto``."""
    dtype = getattr(getattr(engine, "model", None), "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def session_path(app: ChatApp) -> str:
    """The session file: the config's ``session``, else ``chats.db`` by the config file."""
    if app.config.session:
        return app.config.session
    folder_ = app.config_dir
    if folder_ is None:
        return ":memory:"
    folder_.mkdir(parents=True, exist_ok=True)
    return str(folder_ / SESSION_FILENAME)


async def load_saved_adapters(app: ChatApp) -> folder.Discovery | None:
    """Load the adapters of the app's adapters folder made for the loaded model."""
    manager = getattr(app.engine, "adapters", None)
    model = getattr(getattr(app.engine, "config", None), "model", None)
    where = app.adapters_dir
    if manager is None or model is None or where is None or not where.is_dir():
        return None
    found = await asyncio.to_thread(folder.discover, manager, where, model)
    if app.interactive:
        if found.loaded:
            render.print_info(
                app.console,
                f"adapters from {where}: {', '.join(found.loaded)} "
                f"(/adapters use {found.loaded[0]} on a branch)",
            )
        for name, reason in found.failed:
            render.print_warning(app.console, f"adapter {name} not loaded: {reason}")
    return found


async def start(app: ChatApp) -> None:
    from mp13_context import Session
    from mp13_toolbox import Toolbox

    if app.interactive:
        banner = Text("mp13chat", style="mp13.banner")
        banner.append("  /help for commands, Ctrl+D to quit", style="mp13.info")
        app.console.print(banner)
    demo = False
    if app.engine is None:
        choice = await load_engine(app, app.config.model)
        demo = choice.demo
        app.model_label = choice.label
        if app.interactive:
            render.print_info(app.console, f"model: {choice.label} · {engine_summary(app.engine)}")
            if choice.note:
                render.print_warning(app.console, choice.note)
    elif not app.model_label:
        app.model_label = type(app.engine).__name__
    if app.toolbox is None:
        app.toolbox = Toolbox(builtins=app.config.builtin_tools)
    for registration in app.take_pending_tools():
        app.toolbox.register(registration.func, **registration.options)
    approvals = dict(app.config.tool_approvals)
    if not approvals and demo and app.interactive:
        # The demo exists to show the whole loop, approval included.
        approvals = dict.fromkeys(app.toolbox.names(), "ask")
        render.print_info(
            app.console,
            "the demo asks before running a tool; /tools approval NAME allow stops that",
        )
    for name, policy in approvals.items():
        app.toolbox.set_approval(name, policy)
    await load_saved_adapters(app)
    if app.session is None:
        path = session_path(app)
        app.session = await asyncio.to_thread(Session.open, path)
        app.own(app.session.close)
        if path != ":memory:" and app.interactive:
            render.print_info(app.console, f"session: {Path(path)}")
    app.context = make_context(app)
    app.new_conversation()


def start_hint(app: ChatApp, exc: BaseException) -> str | None:
    """What to try after a failed start, in terms of mp13chat's own flags."""
    from mp13_engine import ModelNotFoundError

    if not isinstance(exc, ModelNotFoundError):
        return None
    model = app.config.model or ""
    catalog = app.model_catalog if app.model_catalog is not None else engine_catalog()
    names = ["demo", "tiny", *sorted(catalog_names(catalog))]
    known = f"models mp13chat knows by name: {', '.join(names)} (--model NAME)"
    hub_id = "/" in model and not model.startswith((".", "~", "/"))
    if hub_id and not app.config.engine.get("download"):
        return f"with network access, --download fetches {model} from the Hugging Face hub; {known}"
    return known
