# SPDX-License-Identifier: MIT
"""The engine: status, metrics, the exact next prompt and its token count, training.

Training runs on the engine's worker while chatting goes on. ``/train start`` shows a
progress bar until the job ends; Ctrl+C stops *watching* (the job keeps going:
``/train watch`` shows it again, ``/train cancel`` stops it at the next step). The
trained adapter is loaded at once: ``/adapters use NAME`` on a branch.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from rich.panel import Panel
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from mp13chat import _render as render
from mp13chat._completer import path_candidates
from mp13chat._errors import ChatError, UsageError
from mp13chat._registry import Command, CommandLine, command, group_command, parse_value

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


@command("engine", group="engine")
def engine(app: ChatApp, line: CommandLine) -> None:
    """Show the model, the engine's configuration and whether training runs."""
    eng = app.require_engine("engine status")
    rows: list[tuple[str, Any]] = [("loaded", app.model_label or "-")]
    config = getattr(eng, "config", None)
    if config is not None:
        for name in ("model", "device", "dtype", "quantization", "max_batch_size", "tool_format"):
            rows.append((name, _fmt(getattr(config, name, None))))
    if hasattr(eng, "tool_format"):
        rows.append(("tool format in use", _fmt(eng.tool_format)))
    adapters = getattr(eng, "adapters", None)
    if adapters is not None and hasattr(adapters, "list"):
        rows.append(("adapters loaded", len(adapters.list())))
    job = app.training_job
    if job is not None:
        rows.append(("training", f"{job.adapter}: {'done' if job.done() else 'running'}"))
    app.console.print(render.key_values("engine", rows))


@command("metrics", group="engine")
def metrics(app: ChatApp, line: CommandLine) -> None:
    """Rolling engine metrics over recent requests: throughput, latency, batching."""
    m = app.require_engine("metrics", "metrics").metrics()
    rows = [
        ("requests (window / total)", f"{m.requests} / {m.total_requests}"),
        ("throughput tok/s", _fmt(m.throughput_tokens_per_s)),
        ("latency p50 / p95 s", f"{_fmt(m.latency_p50_s)} / {_fmt(m.latency_p95_s)}"),
        ("ttft p50 / p95 s", f"{_fmt(m.ttft_p50_s)} / {_fmt(m.ttft_p95_s)}"),
        ("mean batch size", _fmt(m.mean_batch_size)),
        ("prompt / completion tokens", f"{m.prompt_tokens} / {m.completion_tokens}"),
        ("finish reasons", ", ".join(f"{k} {v}" for k, v in sorted(m.finish_reasons.items()))),
        ("queued / running", f"{m.queue_depth} / {m.running}"),
    ]
    app.console.print(render.key_values(f"engine metrics (last {m.window})", rows))


@command("prompt", group="engine")
def prompt(app: ChatApp, line: CommandLine) -> None:
    """Show the exact prompt text the model gets for the next reply, and its tokens."""
    text = app.cursor.prompt()
    count = app.engine.count_tokens(text)
    app.console.print(Panel(Text(text), title=f"prompt ({count} tokens)", title_align="left"))


@command("tokens", group="engine", usage="/tokens [TEXT]")
def tokens(app: ChatApp, line: CommandLine) -> None:
    """Count tokens of TEXT, or of the next prompt when no text is given."""
    if line.text:
        count = app.require_engine("token counting").count_tokens(line.text)
        render.print_ok(app.console, f"{count} tokens")
    else:
        render.print_ok(app.console, f"next prompt: {app.cursor.count_tokens()} tokens")


# --- training ----------------------------------------------------------------------------


def _complete_train(app: ChatApp, index: int, words: list[str]) -> list[str]:
    if index == 1:
        return path_candidates(words[-1] if words else "")
    if index >= 2:
        return ["max_steps=", "learning_rate=", "lora_r=", "epochs=", "batch_size=", "seed="]
    return []


def _training_config(words: list[str]) -> Any:
    from mp13_engine import TrainingConfig

    if len(words) < 2:
        raise UsageError("give the adapter name and the dataset file")
    options: dict[str, Any] = {}
    for word in words[2:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise UsageError(f"write options as key=value (e.g. max_steps=50), got {word!r}")
        options[key] = parse_value(value)
    try:
        return TrainingConfig(adapter=words[0], dataset=words[1], **options)
    except TypeError as exc:
        raise UsageError(f"unknown training option ({exc}); see TrainingConfig's fields") from exc


async def watch(app: ChatApp, job: Any) -> None:
    """A progress bar over ``job``'s events until it ends (Ctrl+C stops watching only)."""
    if app.training_announcer is not None:  # we watch it now; no second announcement
        app.training_announcer.cancel()
        app.training_announcer = None
    columns = (
        TextColumn("[bold]{task.fields[adapter]}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
    )
    try:
        with Progress(*columns, console=app.console, transient=False) as progress:
            task = progress.add_task("train", total=None, adapter=job.adapter, info="starting")
            async for event in job.aevents():
                info = f"step {event.step}/{event.max_steps}"
                if event.loss is not None:
                    info += f" loss {event.loss:.4f}"
                if event.tokens_per_s:
                    info += f" {event.tokens_per_s:.0f} tok/s"
                progress.update(task, total=event.max_steps, completed=event.step, info=info)
    except asyncio.CancelledError:
        render.print_info(
            app.console, "stopped watching; training goes on (/train cancel stops it)"
        )
        # Say so when it ends: printed above the prompt (patch_stdout) while you chat.
        app.training_announcer = app.background(announce(app, job))
        raise
    await announce(app, job)


async def announce(app: ChatApp, job: Any) -> None:
    """Print how ``job`` ended (waits for it)."""
    # Poll instead of awaiting job.aresult(): cancelling a task that awaits a wrapped
    # concurrent future cancels that future too, i.e. the job's own result.
    while not job.done():
        await asyncio.sleep(0.2)
    try:
        result = job.result()
    except Exception as exc:
        render.print_error(app.console, exc)
        return
    state = "cancelled" if result.cancelled else "done"
    render.print_ok(
        app.console,
        f"training {state}: adapter {result.adapter}, {result.steps} steps, "
        f"final loss {_fmt(result.final_loss)}, saved at {result.path}; "
        f"/adapters use {result.adapter}",
    )


@command(
    "start",
    group="train",
    usage="/train start NAME DATASET [key=value ...]",
    complete=_complete_train,
)
async def train_start(app: ChatApp, line: CommandLine) -> None:
    """Train a LoRA adapter NAME on DATASET (.json/.jsonl: messages, prompt/completion or
    text rows). Options are TrainingConfig fields, e.g. max_steps=50 lora_r=8
    learning_rate=1e-3. Shows progress; Ctrl+C stops watching, not training."""
    eng = app.require_engine("training", "train")
    job = app.training_job
    if job is not None and not job.done():
        raise ChatError(f"a job ({job.adapter}) is running; /train cancel it or wait")
    config = _training_config(line.words)
    starting = asyncio.ensure_future(asyncio.to_thread(eng.train, config))
    try:
        app.training_job = await asyncio.shield(starting)
    except asyncio.CancelledError:
        # Ctrl+C while the job is being set up: it starts anyway, so keep hold of it.
        app.training_job = await starting
        render.print_info(app.console, "training started; /train watch, /train cancel")
        raise
    await watch(app, app.training_job)


def _require_job(app: ChatApp) -> Any:
    if app.training_job is None:
        raise ChatError("no training job in this run; /train start one")
    return app.training_job


@command("watch", group="train", usage="/train watch")
async def train_watch(app: ChatApp, line: CommandLine) -> None:
    """Show the progress of the current (or last) training job."""
    await watch(app, _require_job(app))


@command("cancel", group="train", usage="/train cancel")
async def train_cancel(app: ChatApp, line: CommandLine) -> None:
    """Stop the running training job at its next step (the adapter so far is kept)."""
    job = _require_job(app)
    if job.done():
        render.print_info(app.console, "the job has already finished")
        return
    job.cancel()
    await watch(app, job)


TRAIN = group_command(
    "train",
    train_start,
    train_watch,
    train_cancel,
    group="engine",
    doc="LoRA training on the loaded model: start (with progress), watch, cancel.",
    default="watch",
)

COMMANDS: tuple[Command, ...] = (engine, metrics, prompt, tokens, TRAIN)
