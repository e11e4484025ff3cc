# SPDX-License-Identifier: MIT
"""The steps of starting a REPL: the model (with progress), the toolbox, the saved
adapters, the session file, and what to say when starting fails.

``ChatApp.start`` runs these steps for what it was not given. Each step takes what it
needs as arguments (no app object) and blocking work runs in a worker thread so the
event loop stays responsive. A named real model is fetched first with its own progress
bar (``_fetch``). After the engine, the adapters saved in the adapters folder for this
model are loaded again (``_adapter_folder``). An interactive start prints a short
banner: the model with its resolved device and dtype (the path is in ``/engine``), its
note, the adapters found; a one-shot run prints none of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from mp13_context import EngineClient
from mp13_toolbox import Toolbox
from mp13chat import _adapter_folder as folder
from mp13chat import _render as render
from mp13chat._config import ChatConfig
from mp13chat._errors import ChatError
from mp13chat._fetch import FetchDisplay
from mp13chat._logs import LibraryLog
from mp13chat._model import ModelCatalog, ModelChoice, is_builtin, is_named, resolve_model
from mp13chat._tools import ToolRegistration

if TYPE_CHECKING:  # pragma: no cover
    from mp13_engine import Engine

T = TypeVar("T")
SESSION_FILENAME = "chats.db"


def print_banner(console: Console) -> None:
    banner = Text("mp13chat", style="mp13.banner")
    banner.append("  /help for commands, Ctrl+D to quit", style="mp13.info")
    console.print(banner)


async def with_progress(console: Console, label: str, func: Callable[[], T]) -> T:
    """Run blocking ``func`` in a thread while an indeterminate progress bar runs (on a
    terminal; elsewhere a progress display would only leave blank lines behind)."""
    if not console.is_terminal:
        return await asyncio.to_thread(func)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(label, total=None)
        return await asyncio.to_thread(func)


async def choose_model(
    console: Console, model: str | None, catalog: ModelCatalog | None
) -> ModelChoice:
    """Resolve ``model``: fetch a named real model (progress bar), build a built-in one."""
    if model is not None and is_named(model, catalog):
        with FetchDisplay(console, model) as display:
            choice = await asyncio.to_thread(
                resolve_model, model, catalog=catalog, progress=display
            )
        if display.fetched:
            render.print_ok(console, f"{model} fetched into {choice.path}")
        return choice
    label = "building the built-in model (first run only)" if is_builtin(model) else "resolving"
    return await with_progress(console, label, lambda: resolve_model(model, catalog=catalog))


async def load_engine(
    console: Console,
    choice: ModelChoice,
    fields: dict[str, Any],
    log: LibraryLog | None,
    *,
    threads: int | None = None,
) -> Engine:
    """Load ``choice`` as an ``Engine`` with the ``EngineConfig`` ``fields``, torch on
    ``threads`` CPU threads (``set_threads``)."""
    from mp13_engine import Engine  # imports torch: only when a real engine is needed

    if log is not None:
        log.route_transformers()
    else:
        # transformers' tqdm bars (weight loading, shard writing) would fight with our
        # own progress display on the terminal the REPL owns.
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

    def load() -> Engine:
        set_threads(threads)
        return Engine.load(choice.path, **fields)

    return await with_progress(console, f"loading {choice.label}", load)


def set_threads(threads: int | None) -> None:
    """Make torch compute with ``threads`` CPU threads (``ChatConfig.threads``; ``None``
    leaves torch's default, one per core). Called in the thread that loads the model,
    just before it: a thread keeps the count it first computed with (the one that
    built the tiny model already has one), while the engine's worker thread, started
    by the load, takes the count set last. It is a setting of the process, as
    ``OMP_NUM_THREADS`` is: the console script owns the process, and a wrapper app that
    sets ``threads`` asks for it."""
    if threads is None:
        return
    import torch  # only when a real engine is loaded

    torch.set_num_threads(threads)


def engine_fields(config: ChatConfig, adapters_dir: Path | None) -> dict[str, Any]:
    """The ``EngineConfig`` fields the app loads its model with (the config's ``engine``
    plus the adapters folder, so short adapter names resolve there)."""
    fields = dict(config.engine)
    if adapters_dir is not None:
        fields.setdefault("adapters_dir", str(adapters_dir))
    return fields


def engine_summary(engine: Engine) -> str:
    """``cpu · float32`` (plus the quantization): where and how the model really runs."""
    parts = [engine.device, engine.dtype, engine.config.quantization]
    return " · ".join(p for p in parts if p)


def make_toolbox(
    config: ChatConfig,
    tools: Iterable[ToolRegistration],
    *,
    ask_for_all: bool,
    toolbox: Toolbox | None = None,
) -> Toolbox:
    """The app's toolbox (``toolbox`` or a new one with the config's builtins) with
    ``tools`` registered and the config's approval policies; ``ask_for_all`` asks
    before every tool the config sets no policy for."""
    toolbox = toolbox if toolbox is not None else Toolbox(builtins=config.builtin_tools)
    for registration in tools:
        options = registration.options
        name = options.get("name") or getattr(registration.func, "__name__", None)
        if name in toolbox and not options.get("replace"):
            # The toolbox's own advice (unregister it first) is not what an app can do.
            raise ChatError(
                f"the app's tool {name!r} has the name of a tool already in the toolbox (a "
                f"builtin, or another of the app's); register it under another name "
                f"(register_tool(f, name='my_{name}')), replace that tool "
                "(register_tool(f, replace=True)), or leave the builtins out "
                "(ChatConfig(builtin_tools=False))"
            )
        toolbox.register(registration.func, **options)
    approvals = dict(config.tool_approvals)
    if not approvals and ask_for_all:
        approvals = dict.fromkeys(toolbox.names(), "ask")
    for name, policy in approvals.items():
        toolbox.set_approval(name, policy)
    return toolbox


async def load_saved_adapters(
    console: Console, engine: EngineClient, where: Path | None, *, quiet: bool
) -> None:
    """Load the adapters of the adapters folder ``where`` made for the loaded model
    (an ``mp13_engine.Engine``; other engine clients have no adapters to load)."""
    if where is None or not where.is_dir():
        return
    from mp13_engine import Engine

    if not isinstance(engine, Engine):
        return
    found = await asyncio.to_thread(folder.discover, engine.adapters, where, engine.config.model)
    if not quiet:
        if found.loaded:
            render.print_info(
                console,
                f"adapters from {where}: {', '.join(found.loaded)} "
                f"(/adapters use {found.loaded[0]} on a branch)",
            )
        for name, reason in found.failed:
            render.print_warning(console, f"adapter {name} not loaded: {reason}")


def session_path(config: ChatConfig, config_dir: Path | None) -> str:
    """The session file: the config's ``session``, else ``chats.db`` by the config file."""
    if config.session:
        return config.session
    if config_dir is None:
        return ":memory:"
    config_dir.mkdir(parents=True, exist_ok=True)
    return str(config_dir / SESSION_FILENAME)


def start_hint(config: ChatConfig, catalog: ModelCatalog | None, exc: BaseException) -> str | None:
    """What to try after a failed start, in terms of mp13chat's own flags."""
    from mp13_engine import ModelNotFoundError

    if not isinstance(exc, ModelNotFoundError):
        return None
    model = config.model or ""
    names = ["demo", "tiny", *sorted(catalog.names() if catalog is not None else ())]
    known = f"models mp13chat knows by name: {', '.join(names)} (--model NAME)"
    hub_id = "/" in model and not model.startswith((".", "~", "/"))
    if hub_id and not config.engine.get("download"):
        return f"with network access, --download fetches {model} from the Hugging Face hub; {known}"
    return known
