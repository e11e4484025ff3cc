# SPDX-License-Identifier: Apache-2.0
"""``TrainingJob``: LoRA / QLoRA training as stepwise work on the engine's worker.

A job uses only the :class:`~mp13_engine._training._host.TrainingHost` it is
handed (``engine.train`` builds it); it never reaches into the engine. Checking its output
folder and finding the checkpoint it resumes from are :mod:`~mp13_engine._training._folder`'s;
whether its adapter's name can be trained, and a new adapter's LoRA config,
:mod:`~mp13_engine._training._adapter`'s; its event log and tokenizing log lines
:mod:`~mp13_engine._training._progress`'s; the error a failed job raises
:mod:`~mp13_engine._training._failure`'s.

Lifecycle (``start_training``):

1. caller thread — read and validate the data, render every row to ids +
   loss mask, apply ``max_seq_len`` (truncate or drop, counted). Any
   ``DatasetError``/``ConfigError`` raises here, before any step.
2. worker (``host.run_on_worker``) — claim the adapter's name (``host.claim``: loading,
   replacing or unloading it, or a second job on it, is refused until the job
   ends), check target modules, add the adapter to
   the model (wrapping the base model as PEFT on first use), build the
   optimizer and scheduler, restore a checkpoint. Errors raise from ``engine.train``.
3. queued — the job emits QUEUED and waits for its turn (jobs run one at a
   time, in the order started); its first ``step()`` emits STARTED.
   Worker, interleaved with serving — ``step()`` runs ONE
   micro-batch; every ``grad_accum`` micro-batches it takes an optimizer step
   and emits a STEP event; an ``eval_every`` evaluation then runs one
   ``eval_batch_size`` batch per call too (EVAL when the last is done), so a large
   validation set never holds serving up. The model is put in train mode only inside
   ``step()`` and back in eval mode before it returns, so serving in between
   runs normally (PEFT refuses mixed-adapter batches in train mode).
4. finish — install the adapter (usable at once) and save it (PEFT format +
   metadata), resolve ``result()``, emit DONE.

Determinism: LoRA init, data order and dropout draw from generators seeded by
``config.seed`` (the global RNG is forked, never reseeded for others), so the
same seed and data give the same losses on CPU, and a resumed run continues the
same sequence. ``cancel()`` takes effect at the next ``step()``: the adapter
trained so far is kept (saved and installed) when at least one optimizer step
ran, and ``result().cancelled`` is True. A job that has not started yet (queued
behind another) is ended at once, between two steps, not when its turn comes.

Waiting: ``result``/``events`` block a thread; ``aresult``/``aevents`` wait on
loop futures that the worker resolves through ``call_soon_threadsafe`` (no
polling, no thread per waiter), and cancelling an awaiter never touches the job.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Hashable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import attrs

from mp13_engine._changes import WeightsChange
from mp13_engine._errors import ConfigError, TrainingError
from mp13_engine._streams import wait_one_way, wait_timeout
from mp13_engine._training._adapter import lora_config, name_problem
from mp13_engine._training._config import (
    TrainingConfig,
    TrainingEvent,
    TrainingEventKind,
    TrainingResult,
    check_targets_exist,
    config_to_dict,
)
from mp13_engine._training._data import Example, load_examples, split
from mp13_engine._training._failure import job_failed, save_failed
from mp13_engine._training._folder import check_output_dir, checkpoint_to_resume
from mp13_engine._training._host import TrainingHost
from mp13_engine._training._progress import EventLog, RenderProgress
from mp13_engine._training._render import TrainingRow, fit_to_length, render_example
from mp13_engine._training._trainer import (
    Trainer,
    autocast_problem,
    cuda_devices,
    load_checkpoint,
    save_checkpoint,
    seeded,
)
from mp13_toolbox import Mp13Error

TRAINING_GROUP = ("train",)


@attrs.define
class _EvalRun:
    """An ``eval_every`` evaluation under way: the validation rows done and their sums."""

    checkpoint: bool  # the step's checkpoint is due once the evaluation is done
    next_row: int = 0
    total: float = 0.0
    count: int = 0


class TrainingJob:
    """A running (or finished) training job; returned by ``engine.train(config)``.

    ``events()`` iterates progress (every consumer sees every event, from the
    start), ``cancel()`` stops it at the next step, ``result(timeout)`` waits
    for the :class:`TrainingResult`.
    """

    group_key: Hashable = TRAINING_GROUP

    def __init__(self, host: TrainingHost, config: TrainingConfig) -> None:
        self.config = config
        self._host = host
        self._future: Future[TrainingResult] = Future()
        self._event_log = EventLog()
        self._cancel = threading.Event()
        self._train: list[TrainingRow] = []
        self._val: list[TrainingRow] = []
        # Rows cut or left out by max_seq_len (counted for the result and metadata).
        self._truncated = self._dropped = 0
        self._trainer: Trainer | None = None
        self._new_adapter = False  # whether setup added the adapter (a failure discards it)
        self._started = False  # whether step() has run (the job left the queue); worker-set
        self._last_checkpoint: Path | None = None  # named by a failure: resume from there
        # (step, loss) of the last evaluation: the final one reuses it when no step came after.
        self._last_eval: tuple[int, float] | None = None
        self._eval_run: _EvalRun | None = None  # an eval_every evaluation under way; worker-set

    # ----- public
    @property
    def adapter(self) -> str:
        """The name the adapter is trained (and installed) under: ``config.adapter``."""
        return self.config.adapter

    def cancel(self) -> None:
        """Stop at the next step; the engine keeps serving. Idempotent.

        The adapter trained so far is kept (saved and installed) when at least one
        optimizer step ran; ``result().cancelled`` is then True. A job still queued
        behind another ends before this returns (waiting at most for the step in
        progress), not when the job ahead of it finishes.
        """
        self._cancel.set()
        if self._started or self._future.done():
            return  # its next step() sees the flag
        # Its step() is not called until the jobs ahead of it end: finish it on the worker now.
        with contextlib.suppress(Mp13Error):  # the engine closed: close() fails the job
            self._host.run_on_worker(self._cancel_unstarted)

    def _cancel_unstarted(self) -> None:
        """Worker: end a cancelled job that never had its turn (step() then returns False)."""
        if not self._started and not self._future.done() and self._trainer is not None:
            try:
                self._finish(cancelled=True)
            except BaseException as exc:
                self.fail(exc)

    def done(self) -> bool:
        """Whether the job has ended (finished, cancelled or failed); never blocks."""
        return self._future.done()

    def result(self, timeout: float | None = None) -> TrainingResult:
        """Wait for the result (``TimeoutError`` after ``timeout`` s); re-raises a failure."""
        limit = wait_timeout(timeout, TrainingError, "result")
        try:
            return self._future.result(limit)
        except TimeoutError:  # the future's own carries no message at all
            if self._future.done():
                raise
            raise TimeoutError(
                f"training job {self.adapter!r} did not finish within {limit} s; it goes on "
                "(wait again with result(), or stop it with cancel())"
            ) from None

    async def aresult(self) -> TrainingResult:
        """Async twin of :meth:`result`; cancelling the awaiting task leaves the job running
        (each awaiter gets its own loop future, fed one way: ``_streams.wait_one_way``)."""
        return await wait_one_way(self._future)

    def events(self, timeout: float | None = None) -> Iterator[TrainingEvent]:
        """Progress events from the first one; ends after the DONE event (or failure).

        ``timeout`` bounds the wait for each next event (None: no limit); past it the
        iterator raises ``TimeoutError`` (the job goes on).
        """
        timeout = wait_timeout(timeout, TrainingError, "events")
        yield from self._event_log.events(timeout, self._waiting_on)

    def _waiting_on(self) -> str:
        """Why no event came in time (named in ``events``' ``TimeoutError``)."""
        return (
            "it is queued: jobs run one at a time, and one started earlier is "
            "still running (cancel() ends a queued job at once)"
            if not self._started
            else "its steps may be slow, or share the worker with requests"
        )

    def aevents(self) -> AsyncIterator[TrainingEvent]:
        """Async twin of :meth:`events`: awaits each event without blocking the loop."""
        return self._event_log.aevents()

    @property
    def total_steps(self) -> int:
        """Optimizer steps this job takes (``max_steps``, or ``epochs`` over the rows)."""
        cfg = self.config
        if cfg.max_steps is not None:
            return cfg.max_steps
        per_epoch = math.ceil(len(self._train) / cfg.batch_size)
        return max(1, math.ceil(per_epoch * cfg.epochs / cfg.grad_accum))

    @property
    def output_dir(self) -> Path:
        """Where the adapter is saved: ``output_dir``, else ``adapters_dir/<adapter>``."""
        if self.config.output_dir is not None:
            return Path(self.config.output_dir).expanduser().resolve()
        base = self._host.adapters_dir or Path.cwd() / "adapters"
        return (base / self.config.adapter).resolve()

    # ----- phase 1: caller thread
    def _prepare(self) -> None:
        """Read, validate and render the data (DatasetError/ConfigError/TrainingError here)."""
        cfg, host = self.config, self._host
        # The name first: its fix (another name) may also settle where the adapter is saved.
        if (name_error := name_problem(cfg, host.is_loaded(cfg.adapter))) is not None:
            raise name_error
        check_output_dir(self.output_dir, cfg)
        precision = host.run_on_worker(lambda: autocast_problem(host.model(), cfg.precision))
        if precision is not None:
            raise ConfigError(precision)
        train = load_examples(cfg.dataset, "dataset")
        if cfg.validation is not None:
            val = load_examples(cfg.validation, "validation set")
        else:
            train, val = split(train, cfg.validation_split, cfg.seed)

        progress = RenderProgress(cfg.adapter, len(train) + len(val))

        def render(example: Example) -> TrainingRow:
            with host.tokenizer_lock:  # per row, so serving is never held up for a whole dataset
                row = render_example(
                    host.tokenizer, example, cfg.loss_on, host.prepare, host.encode_chat
                )
            progress.tick()
            return row

        self._train = self._fit_to_length([render(e) for e in train])
        self._val = self._fit_to_length([render(e) for e in val])
        progress.done(self._truncated, self._dropped)
        if not self._train:
            if cfg.overflow == "drop":
                raise TrainingError(
                    f"No training row fits max_seq_len={cfg.max_seq_len} with tokens to learn "
                    f'({self._dropped} dropped). Raise max_seq_len or use overflow="truncate".'
                )
            raise TrainingError(
                f"No training row has tokens to learn within its first max_seq_len="
                f"{cfg.max_seq_len} tokens ({self._dropped} dropped: cut to that length, none "
                "of their assistant or completion tokens is left). Raise max_seq_len."
            )

    def _fit_to_length(self, rows: list[TrainingRow]) -> list[TrainingRow]:
        cfg = self.config
        rows, truncated, dropped = fit_to_length(rows, cfg.max_seq_len, cfg.overflow)
        self._truncated += truncated
        self._dropped += dropped
        return rows

    # ----- phase 2: worker
    def _setup_on_worker(self) -> None:
        """Claim the name, add (or pick) the adapter, build the trainer, resume. Worker only."""
        cfg, host = self.config, self._host
        host.claim(cfg.adapter)  # another job training this name: TrainingError, nothing touched
        try:
            model = self._add_or_pick_adapter()
            model.set_adapter(cfg.adapter)  # also makes only this adapter trainable
            params = [p for p in model.parameters() if p.requires_grad]
            if not params:
                raise TrainingError(f"Adapter {cfg.adapter!r} has no trainable parameters.")
            self._trainer = Trainer.create(
                cfg, self._train, self.total_steps, params, model, host.pad_id
            )
            if cfg.resume_from is not None:
                checkpoint = checkpoint_to_resume(self.output_dir, cfg.resume_from)
                load_checkpoint(self._trainer, checkpoint, model, cfg.adapter)
                if self._trainer.step >= self.total_steps:
                    # step() would still take one more step (and report step n+1 of n).
                    raise TrainingError(
                        f"Checkpoint {str(checkpoint)!r} is at step {self._trainer.step}, and "
                        f"this job ends at step {self.total_steps}; set max_steps above "
                        f"{self._trainer.step} to train further from it."
                    )
            model.eval()
        except BaseException:
            if self._new_adapter:
                host.discard_adapter(cfg.adapter)
            host.release(cfg.adapter, self._changed_in_place())
            raise

    def _add_or_pick_adapter(self) -> Any:
        """The model with the job's adapter: the loaded one (continue_training) or a new one."""
        cfg, host = self.config, self._host
        # Asked again here, on the worker: the adapter may have been loaded or unloaded since.
        if (name_error := name_problem(cfg, host.is_loaded(cfg.adapter))) is not None:
            raise name_error
        if host.is_loaded(cfg.adapter):
            return host.model()
        check_targets_exist(host.base_model(), cfg.target_modules)
        lora = lora_config(cfg)
        with seeded(cfg.seed, cuda_devices(host.model())):
            model = host.add_adapter(cfg.adapter, lora)
        self._new_adapter = True
        return model

    def _changed_in_place(self) -> bool:
        """Whether this job changed a loaded adapter's weights (an optimizer step, or a
        checkpoint restored into it); combinations built from its old ones are then stale."""
        trainer = self._trainer
        if self._new_adapter or trainer is None:
            return False
        return trainer.step > trainer.first_step or self.config.resume_from is not None

    # ----- phase 3: queued, then worker, one micro-batch per call
    def _queue(self) -> None:
        """Report QUEUED and hand the set-up job to the worker (in this order: the worker may
        take the first step, and report STARTED, at once)."""
        assert self._trainer is not None, "_queue() before _setup_on_worker()"
        self._emit(TrainingEventKind.QUEUED, self._trainer)
        self._host.submit_job(self)

    def step(self) -> bool:
        """One micro-batch (and an optimizer step every ``grad_accum``); False when finished.

        The engine's worker calls it between serving steps (the ``Job`` protocol of
        ``_scheduler``); it touches the model, so never call it yourself."""
        if self._future.done():
            return False
        # A step changes this adapter's weights only: the prefix cache keeps the base
        # model's blocks and the other adapters' (what ending the job drops, it says itself).
        self._host.note_change(WeightsChange.of_adapters(self.config.adapter))
        try:
            trainer = self._trainer
            assert trainer is not None, "step() before _setup_on_worker()"
            model = self._host.model()
            if not self._started:
                self._started = True
                # Time (speed, ETA, elapsed_s) counts from here, not from the wait in the queue.
                trainer.begin(model)
                self._emit(TrainingEventKind.STARTED, trainer)
            if self._cancel.is_set():
                self._finish(cancelled=True)
                return False
            if model.active_adapters != [self.config.adapter]:
                model.set_adapter(self.config.adapter)
            # Loading or combining other adapters between steps may refreeze parameters.
            for param in trainer.params:
                if not param.requires_grad:
                    param.requires_grad_(True)
            if self._eval_run is not None:
                self._eval_batch(model, trainer, self._eval_run)
            else:
                model.train()
                try:
                    stepped = trainer.micro_step(model)
                finally:
                    model.eval()
                if stepped:
                    self._after_optimizer_step(model, trainer)
            if trainer.step >= self.total_steps and self._eval_run is None:
                self._finish(cancelled=False)
                return False
            return True
        except BaseException as exc:
            self.fail(exc)
            return False

    def _after_optimizer_step(self, model: Any, trainer: Trainer) -> None:
        cfg = self.config
        elapsed = time.perf_counter() - trainer.started
        done = trainer.step - trainer.first_step
        eta = elapsed / done * (self.total_steps - trainer.step) if done else None
        self._emit(
            TrainingEventKind.STEP, trainer, tokens_per_s=trainer.last_tokens_per_s, eta_s=eta
        )
        checkpoint = bool(cfg.checkpoint_every) and trainer.step % cfg.checkpoint_every == 0
        if cfg.eval_every and self._val and trainer.step % cfg.eval_every == 0:
            # One validation batch per step() call, as a micro-batch is: a large validation
            # set held the worker, requests included, for the whole evaluation.
            self._eval_run = _EvalRun(checkpoint=checkpoint)
        elif checkpoint:
            self._checkpoint(model, trainer)

    def _eval_batch(self, model: Any, trainer: Trainer, run: _EvalRun) -> None:
        """The next validation batch of an ``eval_every`` evaluation; the last one reports EVAL
        (and saves the checkpoint due at this step, in the order a step reports them)."""
        size = self.config.eval_batch_size
        loss_sum, n = trainer.eval_sum(model, self._val[run.next_row : run.next_row + size])
        run.total += loss_sum
        run.count += n
        run.next_row += size
        if run.next_row < len(self._val):
            return
        self._eval_run = None
        loss = run.total / max(run.count, 1)
        self._last_eval = (trainer.step, loss)
        self._emit(TrainingEventKind.EVAL, trainer, eval_loss=loss)
        if run.checkpoint:
            self._checkpoint(model, trainer)

    def _checkpoint(self, model: Any, trainer: Trainer) -> None:
        path = self.output_dir / "checkpoints" / f"step-{trainer.step}"
        save_checkpoint(trainer, path, model, self.config.adapter)
        self._last_checkpoint = path
        self._emit(TrainingEventKind.CHECKPOINT, trainer, path=str(path))

    def _evaluate(self, model: Any, trainer: Trainer) -> float:
        """The validation loss, reported as an EVAL event (callers check there are rows)."""
        loss = trainer.evaluate(model, self._val)
        self._last_eval = (trainer.step, loss)
        self._emit(TrainingEventKind.EVAL, trainer, eval_loss=loss)
        return loss

    # ----- phase 4: finish / fail
    def _finish(self, cancelled: bool) -> None:
        cfg, host, trainer = self.config, self._host, self._trainer
        assert trainer is not None, "_finish() before _setup_on_worker()"
        model = host.model()
        trainer.close(model)
        eval_loss = None
        if self._val and (trainer.step > trainer.first_step or not cancelled):
            if self._last_eval is not None and self._last_eval[0] == trainer.step:
                # eval_every already evaluated this step: the same weights, the same loss.
                eval_loss = self._last_eval[1]
            else:
                eval_loss = self._evaluate(model, trainer)
        path: str | None = None
        if trainer.step > 0:
            metadata = {
                "training": {
                    "config": config_to_dict(cfg),
                    "steps": trainer.step,
                    "final_loss": trainer.last_loss,
                    "eval_loss": eval_loss,
                    "train_rows": len(self._train),
                    "validation_rows": len(self._val),
                    "truncated_rows": self._truncated,
                    "dropped_rows": self._dropped,
                    "cancelled": cancelled,
                }
            }
            try:
                path = str(host.install_adapter(cfg.adapter, self.output_dir, metadata))
            except (OSError, Mp13Error) as exc:
                loaded = host.is_loaded(cfg.adapter)
                raise save_failed(cfg.adapter, trainer.step, self.output_dir, exc, loaded) from exc
        elif self._new_adapter:
            host.discard_adapter(cfg.adapter)
        result = TrainingResult(
            adapter=cfg.adapter,
            path=path,
            steps=trainer.step,
            final_loss=trainer.last_loss,
            eval_loss=eval_loss,
            cancelled=cancelled,
            train_rows=len(self._train),
            truncated_rows=self._truncated,
            dropped_rows=self._dropped,
            train_tokens=trainer.tokens_seen,
            elapsed_s=time.perf_counter() - trainer.started,
        )
        host.release(cfg.adapter, False)  # a changed adapter was installed above
        self._emit(TrainingEventKind.DONE, trainer, eval_loss=eval_loss, path=path)
        self._future.set_result(result)
        self._event_log.close()

    def fail(self, exc: BaseException) -> None:
        """The job raised, or the engine closed: clean up and fail ``result()``.

        Called by the engine's worker; to stop a job, use ``cancel()``."""
        if self._future.done():
            return
        with contextlib.suppress(Exception):
            model = self._host.model()
            if self._trainer is not None:
                self._trainer.close(model)
            model.eval()
            if self._new_adapter:
                self._host.discard_adapter(self.config.adapter)
        if self._trainer is not None:  # set up: this job holds the claim on the name
            # Like the clean-up above: nothing may keep the failure from reaching result().
            with contextlib.suppress(Exception):
                self._host.release(self.config.adapter, self._changed_in_place())
        exc = job_failed(exc, self.config.adapter, self._last_checkpoint)
        self._future.set_exception(exc)
        self._event_log.close()

    # ----- events
    def _emit(self, kind: TrainingEventKind, trainer: Trainer, **fields: Any) -> None:
        event = TrainingEvent(
            kind=kind,
            step=trainer.step,
            max_steps=self.total_steps,
            loss=trainer.last_loss,
            learning_rate=trainer.last_lr,
            elapsed_s=time.perf_counter() - trainer.started,
            epoch=trainer.epoch,
            **fields,
        )
        self._event_log.append(event)


def start_training(host: TrainingHost, config: TrainingConfig) -> TrainingJob:
    """``engine.train``: validate and prepare ``config``, set up on the worker, submit the job."""
    if not isinstance(config, TrainingConfig):
        raise ConfigError(
            f"engine.train needs a TrainingConfig, got {type(config).__name__}; build one with "
            "TrainingConfig(adapter=..., dataset=...)."
        )
    job = TrainingJob(host, config)
    job._prepare()
    host.run_on_worker(job._setup_on_worker)
    job._queue()
    return job
