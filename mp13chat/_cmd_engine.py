# SPDX-License-Identifier: MIT
"""The engine: status, metrics, the exact next prompt and its token count, training.

Training runs on the engine's worker while chatting goes on. ``/train start`` shows a
progress bar until the job ends; Ctrl+C stops *watching* (the job keeps going:
``/train watch`` shows it again, ``/train cancel`` stops it at the next step). The
trained adapter is loaded at once (``/adapters use NAME`` on a branch) and saved in
the adapters folder, from where the next start loads it again (``_adapter_folder``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    Progress,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mp13_engine import TrainingConfig, TrainingEvent, TrainingEventKind
from mp13_toolbox import did_you_mean, plural
from mp13chat import _render as render
from mp13chat._completer import complete_paths
from mp13chat._errors import ChatError, UsageError
from mp13chat._registry import (
    Command,
    CommandLine,
    command,
    group_command,
    parse_assignments,
    parse_value,
)
from mp13chat._repl import Repl

if TYPE_CHECKING:  # pragma: no cover
    from mp13_engine import TrainingJob  # imports torch


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


@command("engine", group="engine")
def engine(repl: Repl, line: CommandLine) -> None:
    """Show the model, the engine's configuration and whether training runs."""
    from mp13_engine import Engine

    eng = repl.engine
    rows: list[tuple[str, Any]] = [("loaded", repl.model_label or "-")]
    if isinstance(eng, Engine):
        rows += [
            ("model", _fmt(eng.config.model)),
            # What the model really runs on, not the configured "auto".
            ("device", eng.device),
            ("dtype", eng.dtype),
            ("quantization", _fmt(eng.config.quantization)),
            ("max_batch_size", _fmt(eng.config.max_batch_size)),
            ("tool format", _fmt(eng.tool_format)),
            ("adapters loaded", len(eng.adapters.list())),
        ]
    if repl.adapters_dir is not None:
        rows.append(("adapters folder", str(repl.adapters_dir)))
    job = repl.training_job
    if job is not None:
        rows.append(("training", f"{job.adapter}: {'done' if job.done() else 'running'}"))
    repl.console.print(render.key_values("engine", rows))


@command("metrics", group="engine")
def metrics(repl: Repl, line: CommandLine) -> None:
    """Rolling engine metrics over recent requests: throughput, latency, batching."""
    m = repl.real_engine("metrics").metrics()
    rows = [
        ("requests (window / total)", f"{m.requests} / {m.total_requests}"),
        # Counted in the total, never in the window's figures: say how many, or the two
        # numbers above disagree with no reason given.
        ("rejected (never ran)", str(m.rejected)),
        # Cancelled while queued (a stale background warm-up): not refused, so not above.
        ("cancelled before running", str(m.cancelled_before_start)),
        ("throughput tok/s", _fmt(m.throughput_tokens_per_s)),
        ("latency p50 / p95 s", f"{_fmt(m.latency_p50_s)} / {_fmt(m.latency_p95_s)}"),
        ("ttft p50 / p95 s", f"{_fmt(m.ttft_p50_s)} / {_fmt(m.ttft_p95_s)}"),
        ("mean batch size", _fmt(m.mean_batch_size)),
        ("prompt / completion tokens", f"{m.prompt_tokens} / {m.completion_tokens}"),
        ("finish reasons", ", ".join(f"{k} {v}" for k, v in sorted(m.finish_reasons.items()))),
        ("queued / running", f"{m.queue_depth} / {m.running}"),
        (
            "prefix cache hits / tokens saved",
            f"{m.prefix_cache.hits} of {m.prefix_cache.lookups} / {m.prefix_cache.tokens_saved}",
        ),
    ]
    repl.console.print(render.key_values(f"engine metrics (last {m.window})", rows))


#: Where the next message goes in a previewed prompt (shown, never sent).
SLOT = "‹your message›"
_SENTINEL = "MP13SLOT"


@attrs.frozen
class NextPrompt:
    """The prompt of the next request: ``before`` + the message + ``after``."""

    before: str
    after: str
    message: str | None  # None: the slot is shown instead of a message
    tokens: int  # of the whole prompt, or of before + after when there is no message


def next_prompt(repl: Repl, message: str | None = None) -> NextPrompt:
    """What the engine would be fed if ``message`` were sent from the cursor now:
    ``engine.format_prompt`` of the request the runner builds (the branch's messages,
    system message, tools and parameters, plus the new user message). Without a
    message, where it would go is cut out and the tokens around it counted."""
    engine = repl.engine
    text = engine.format_prompt(repl.cursor.request(message if message is not None else _SENTINEL))
    if message is not None:
        return NextPrompt(text, "", message, engine.count_tokens(text))
    before, found, after = text.partition(_SENTINEL)
    if not found or _SENTINEL in after:  # the template moved the message: show it as is
        # Counted without the message, like the prompt around a single slot below.
        tokens = engine.count_tokens(text.replace(_SENTINEL, ""))
        return NextPrompt(text.replace(_SENTINEL, SLOT), "", None, tokens)
    tokens = engine.count_tokens(before) + (engine.count_tokens(after) if after else 0)
    return NextPrompt(before, after, None, tokens)


@command("prompt", group="engine", usage="/prompt [MESSAGE]")
def prompt(repl: Repl, line: CommandLine) -> None:
    """Show the exact prompt the model gets when you send your next message, with its
    token count.

    It is the chat template applied to this branch as it will be sent: system message
    (the template's default on a new conversation), tools, the conversation so far,
    then your message where ‹your message› stands, or MESSAGE when given."""
    shown = next_prompt(repl, line.text or None)
    body = Text(shown.before)
    if shown.message is None:
        body.append(SLOT if shown.after else "", style="reverse")
        body.append(shown.after)
        title = f"prompt ({plural(shown.tokens, 'token')} + your message)"
    else:
        title = f"prompt ({plural(shown.tokens, 'token')})"
    repl.console.print(Panel(body, title=title, title_align="left"))


@command("tokens", group="engine", usage="/tokens [TEXT]")
def tokens(repl: Repl, line: CommandLine) -> None:
    """Count the tokens of TEXT, or of the next prompt around your next message."""
    if line.text:
        count = repl.engine.count_tokens(line.text)
        render.print_ok(repl.console, plural(count, "token"))
    else:
        count = next_prompt(repl).tokens
        render.print_ok(repl.console, f"next prompt: {plural(count, 'token')} + your message")


# --- training ----------------------------------------------------------------------------


def _training_options() -> list[str]:
    """The ``TrainingConfig`` fields ``/train start`` takes as ``key=value``."""
    return [f.name for f in attrs.fields(TrainingConfig) if f.name not in ("adapter", "dataset")]


def _complete_train(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index == 1:
        return complete_paths(repl, index, words)
    return [f"{name}=" for name in _training_options()] if index >= 2 else []


def _training_config(words: list[str], adapters_dir: Path | None) -> TrainingConfig:
    if len(words) < 2:
        raise UsageError("give the adapter name and the dataset file")
    pairs = parse_assignments(words[2:], "options", "key=value (e.g. max_steps=50)")
    options: dict[str, Any] = {key: parse_value(value) for key, value in pairs.items()}
    if adapters_dir is not None:  # else the engine's default folder
        options.setdefault("output_dir", str(adapters_dir / words[0]))
    known = _training_options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        hints = ", ".join(name + did_you_mean(name, known) for name in unknown)
        raise UsageError(f"unknown training option {hints}; the options are {', '.join(known)}")
    return TrainingConfig(adapter=words[0], dataset=words[1], **options)


def _progress_info(event: TrainingEvent) -> str:
    """The words beside the progress bar for ``event`` (QUEUED and STARTED are no step)."""
    if event.kind is TrainingEventKind.QUEUED:
        return "queued (jobs run one at a time)"
    if event.kind is TrainingEventKind.STARTED:
        return "started"
    info = f"step {event.step}/{event.max_steps}"
    if event.loss is not None:
        info += f" loss {event.loss:.4f}"
    if event.tokens_per_s:
        info += f" {event.tokens_per_s:.0f} tok/s"
    return info


class _TrainingProgress(Progress):
    """A training job's bar with its step, loss and speed beside it, or under it where
    the terminal is too narrow for both on one line (at 40 columns the bar shrank to two
    cells and the time left was cut to "0:0…")."""

    #: The fewest cells the bar keeps on a line shared with the words.
    BAR_MIN = 10

    def __init__(self, console: Console) -> None:
        name, bar = TextColumn("[bold]{task.fields[adapter]}"), BarColumn()
        done, left = TaskProgressColumn(), TimeRemainingColumn()
        words = TextColumn("{task.fields[info]}")
        self._out = console  # rich asks for the renderables before Progress.console exists
        self._bar_only = Progress(name, bar, done, left, console=console)
        super().__init__(name, bar, done, words, left, console=console, transient=False)

    def get_renderables(self) -> Iterable[RenderableType]:
        # gaps between the five columns, "100%" and "-:--:--" (the time left)
        fixed = 4 + 4 + 7 + self.BAR_MIN
        if max((_line_width(t) for t in self.tasks), default=0) + fixed <= self._out.width:
            yield self.make_tasks_table(self.tasks)
            return
        yield self._bar_only.make_tasks_table(self.tasks)
        for task in self.tasks:
            yield Text("  " + str(task.fields.get("info", "")))


def _line_width(task: Task) -> int:
    return cell_len(f"{task.fields.get('adapter', '')} {task.fields.get('info', '')}")


async def watch(repl: Repl, job: TrainingJob) -> None:
    """A progress bar over ``job``'s events until it ends (Ctrl+C stops watching only)."""
    if repl.training_announcer is not None:  # we watch it now; no second announcement
        repl.training_announcer.cancel()
        repl.training_announcer = None
    try:
        with _TrainingProgress(repl.console) as progress:
            task = progress.add_task("train", total=None, adapter=job.adapter, info="starting")
            async for event in job.aevents():
                info = _progress_info(event)
                progress.update(task, total=event.max_steps, completed=event.step, info=info)
    except asyncio.CancelledError:
        render.print_info(
            repl.console, "stopped watching; training goes on (/train cancel stops it)"
        )
        repl.cancel_reported()
        # Say so when it ends: printed above the prompt (patch_stdout) while you chat.
        repl.training_announcer = repl.background(announce(repl, job))
        raise
    await announce(repl, job)


async def announce(repl: Repl, job: TrainingJob) -> None:
    """Print how ``job`` ended (waits for it; cancelling this wait leaves the job alone)."""
    try:
        result = await job.aresult()
    except Exception as exc:
        render.print_error(repl.console, exc)
        return
    state = "cancelled" if result.cancelled else "done"
    render.print_ok(
        repl.console,
        f"training {state}: adapter {result.adapter}, {plural(result.steps, 'step')}, "
        f"final loss {_fmt(result.final_loss)}, saved at {result.path}; "
        f"/adapters use {result.adapter}",
    )


@command(
    "start",
    group="train",
    usage="/train start NAME DATASET [key=value ...]",
    complete=_complete_train,
)
async def train_start(repl: Repl, line: CommandLine) -> None:
    """Train a LoRA adapter NAME on DATASET (.json/.jsonl: messages, prompt/completion or
    text rows). Options are TrainingConfig fields, e.g. max_steps=50 lora_r=8
    learning_rate=1e-3. Shows progress; Ctrl+C stops watching, not training.

    The adapter is saved as NAME in the adapters folder (/engine shows where; give
    output_dir=PATH to save elsewhere), so the next start loads it again."""
    eng = repl.real_engine("training")
    last = repl.training_job
    if last is not None and not last.done():
        raise ChatError(f"a job ({last.adapter}) is running; /train cancel it or wait")
    config = _training_config(line.words, repl.adapters_dir)
    if config.adapter in eng.adapters and not config.continue_training:
        # The engine's messages say continue_training=True, then overwrite=True for the
        # saved copy in its folder: say both at once, as REPL options.
        name = config.adapter
        raise ChatError(
            f"an adapter named {name!r} is already loaded; pick another NAME, add "
            f"continue_training=true overwrite=true to train {name} further (its saved copy "
            f"is replaced), or /adapters unload {name} first"
        )
    starting = asyncio.ensure_future(asyncio.to_thread(eng.train, config))
    try:
        job: TrainingJob = await asyncio.shield(starting)
        repl.training_job = job
    except asyncio.CancelledError:
        # Ctrl+C while the job is being set up: it starts anyway, so keep hold of it.
        repl.training_job = await starting
        render.print_info(repl.console, "training started; /train watch, /train cancel")
        raise
    await watch(repl, job)


def _require_job(repl: Repl) -> TrainingJob:
    if repl.training_job is None:
        raise ChatError("no training job in this run; /train start one")
    return repl.training_job


@command("watch", group="train", usage="/train watch")
async def train_watch(repl: Repl, line: CommandLine) -> None:
    """Show the progress of the current (or last) training job."""
    await watch(repl, _require_job(repl))


@command("cancel", group="train", usage="/train cancel")
async def train_cancel(repl: Repl, line: CommandLine) -> None:
    """Stop the running training job at its next step (the adapter so far is kept)."""
    job = _require_job(repl)
    if job.done():
        render.print_info(repl.console, "the job has already finished")
        return
    job.cancel()
    await watch(repl, job)


TRAIN: Command[Repl] = group_command(
    "train",
    train_start,
    train_watch,
    train_cancel,
    group="engine",
    doc="LoRA training on the loaded model: start (with progress), watch, cancel.",
    default="watch",
)

COMMANDS: tuple[Command[Repl], ...] = (engine, metrics, prompt, tokens, TRAIN)
