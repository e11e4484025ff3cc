# SPDX-License-Identifier: Apache-2.0
"""``TrainingJob``: LoRA / QLoRA training as stepwise work on the engine's worker.

Lifecycle (``start_training``):

1. caller thread — read and validate the data, render every row to ids +
   loss mask, apply ``max_seq_len`` (truncate or drop, counted). Any
   ``DatasetError``/``ConfigError`` raises here, before any step.
2. worker (``_run_on_worker``) — check target modules, add the adapter to the
   model (wrapping the base model as PEFT on first use), build the optimizer
   and scheduler, restore a checkpoint. Errors raise from ``engine.train``.
3. worker, interleaved with inference waves — ``step()`` runs ONE
   micro-batch; every ``grad_accum`` micro-batches it takes an optimizer step
   and emits a "step" event. The model is put in train mode only inside
   ``step()`` and back in eval mode before it returns, so waves in between
   run normally (PEFT refuses mixed-adapter batches in train mode).
4. finish — save (PEFT format + metadata), register the adapter with the
   manager (usable at once), resolve ``result()``, emit "done".

Determinism: LoRA init, data order and dropout draw from generators seeded by
``config.seed`` (the global RNG is forked, never reseeded for others), so the
same seed and data give the same losses on CPU, and a resumed run continues the
same sequence. ``cancel()`` takes effect at the next ``step()``: the adapter
trained so far is kept (saved and registered) when at least one optimizer step
ran, and ``result().cancelled`` is True.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from mp13_engine._errors import ConfigError, Mp13Error, TrainingError
from mp13_engine._training._config import (
    TrainingConfig,
    TrainingEvent,
    TrainingResult,
    check_targets_exist,
)
from mp13_engine._training._data import load_examples, split
from mp13_engine._training._render import Rendered, render_example
from mp13_engine._training._state import (
    TrainerState,
    load_checkpoint,
    save_checkpoint,
    seeded,
)

TRAINING_GROUP = ("train",)


def _engine_tokenizer(engine: Any) -> Any:
    return engine._state.tokenizer


def _engine_prepare(engine: Any) -> Any:
    """The serving formatter's own ``prepare``: training renders chats exactly as serving."""
    return engine._state.formatter.prepare


def _tokenizer_lock(engine: Any) -> Any:
    # HF fast tokenizers raise "Already borrowed" when two threads use one at once; the
    # engine serialises its own calls with this lock, so rendering here takes it too.
    lock = getattr(getattr(engine._state, "tokens", None), "_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


class TrainingJob:
    """A running (or finished) training job; returned by ``engine.train(config)``.

    ``events()`` iterates progress (every consumer sees every event, from the
    start), ``cancel()`` stops it at the next step, ``result(timeout)`` waits
    for the :class:`TrainingResult`.
    """

    group_key = TRAINING_GROUP

    def __init__(self, engine: Any, config: TrainingConfig) -> None:
        self.config = config
        self._engine = engine
        self._manager = engine.adapters
        self._future: Future[TrainingResult] = Future()
        self._events: list[TrainingEvent] = []
        self._cond = threading.Condition()
        self._closed = False
        self._cancel = threading.Event()
        self._train: list[Rendered] = []
        self._val: list[Rendered] = []
        self._counts = {"truncated": 0, "dropped": 0}
        self._state: TrainerState | None = None
        self._new_adapter = True

    # ----- public
    @property
    def adapter(self) -> str:
        return self.config.adapter

    def cancel(self) -> None:
        """Stop at the next step; the engine keeps serving. Idempotent."""
        self._cancel.set()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> TrainingResult:
        """Wait for the result (``TimeoutError`` after ``timeout`` s); re-raises a failure."""
        return self._future.result(timeout)

    async def aresult(self) -> TrainingResult:
        """Async twin of :meth:`result`; cancelling the awaiting task leaves the job running.

        Each awaiter gets its own loop future fed one way from the job's future
        (``asyncio.wrap_future`` chains both ways: cancelling the awaiter would
        cancel the job's result for everyone).
        """
        import asyncio

        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[TrainingResult] = loop.create_future()

        def copy(source: Future[TrainingResult]) -> None:
            if waiter.done():  # the awaiter was cancelled; nobody wants this copy
                return
            if source.cancelled():
                waiter.cancel()
            elif (exc := source.exception()) is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(source.result())

        def on_done(source: Future[TrainingResult]) -> None:
            # RuntimeError: the awaiting loop closed meanwhile, so there is nobody to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(copy, source)

        self._future.add_done_callback(on_done)
        return await waiter

    def events(self, timeout: float | None = None) -> Iterator[TrainingEvent]:
        """Progress events from the first one; ends after the "done" event (or failure)."""
        i = 0
        while True:
            with self._cond:
                if not self._cond.wait_for(self._beyond(i), timeout):
                    raise TimeoutError(f"no training event within {timeout} s")
                new, closed = self._events[i:], self._closed
            yield from new
            i += len(new)
            if closed and i >= len(self._events):
                return

    async def aevents(self) -> AsyncIterator[TrainingEvent]:
        """Async twin of :meth:`events` (waits in a thread, never blocks the loop)."""
        import asyncio

        i = 0
        while True:
            with self._cond:
                ready = len(self._events) > i or self._closed
            if not ready:
                await asyncio.to_thread(self._wait_beyond, i)
            with self._cond:
                new, closed = self._events[i:], self._closed
            for event in new:
                yield event
            i += len(new)
            if closed and i >= len(self._events):
                return

    def _beyond(self, i: int) -> Any:
        return lambda: len(self._events) > i or self._closed

    def _wait_beyond(self, i: int) -> None:
        with self._cond:
            self._cond.wait_for(self._beyond(i), 1.0)

    # ----- phase 1: caller thread
    def _prepare(self) -> None:
        cfg = self.config
        tokenizer = _engine_tokenizer(self._engine)
        prepare = _engine_prepare(self._engine)
        train = load_examples(cfg.dataset, "dataset")
        if cfg.validation is not None:
            val = load_examples(cfg.validation, "validation set")
        else:
            train, val = split(train, cfg.validation_split, cfg.seed)
        lock = _tokenizer_lock(self._engine)
        encode_chat = self._engine._state.tokens.encode_chat  # rows cannot forge turns

        def render(example: Any) -> Rendered:
            with lock:  # per row, so waves are never held up for a whole dataset
                return render_example(tokenizer, example, cfg.loss_on, prepare, encode_chat)

        self._train = self._fit([render(e) for e in train])
        self._val = self._fit([render(e) for e in val])
        if not self._train:
            raise TrainingError(
                f"No training row fits max_seq_len={cfg.max_seq_len} with tokens to learn "
                f"({self._counts['dropped']} dropped). Raise max_seq_len or use "
                'overflow="truncate".'
            )

    def _fit(self, rows: list[Rendered]) -> list[Rendered]:
        cfg, out = self.config, []
        for row in rows:
            if len(row.ids) > cfg.max_seq_len:
                if cfg.overflow == "drop":
                    self._counts["dropped"] += 1
                    continue
                self._counts["truncated"] += 1
                row = Rendered(row.ids[: cfg.max_seq_len], row.mask[: cfg.max_seq_len])
            if row.n_loss == 0:
                self._counts["dropped"] += 1
                continue
            out.append(row)
        return out

    @property
    def total_steps(self) -> int:
        cfg = self.config
        if cfg.max_steps is not None:
            return cfg.max_steps
        per_epoch = math.ceil(len(self._train) / cfg.batch_size)
        return max(1, math.ceil(per_epoch * cfg.epochs / cfg.grad_accum))

    # ----- phase 2: worker
    def _setup_on_worker(self) -> None:
        from peft import LoraConfig

        cfg = self.config
        manager = self._manager
        if cfg.adapter in manager:
            if not cfg.continue_training:
                raise TrainingError(
                    f"An adapter named {cfg.adapter!r} is already loaded. Pick another name, "
                    "unload it, or set continue_training=True to train it further."
                )
            self._new_adapter = False
            model = manager._model()
        else:
            if cfg.continue_training:
                raise TrainingError(
                    f"continue_training=True but no adapter {cfg.adapter!r} is loaded; load it "
                    "first with engine.adapters.load(path, name=...)."
                )
            check_targets_exist(manager._base_model(), cfg.target_modules)
            lora = LoraConfig(
                r=cfg.lora_r,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules=list(cfg.target_modules)
                if not isinstance(cfg.target_modules, str)
                else cfg.target_modules,
                bias="none",
                task_type="CAUSAL_LM",
            )
            with seeded(cfg.seed, manager._model()):
                model = manager._add_for_training_on_worker(cfg.adapter, lora)
        try:
            model.base_model.set_adapter(cfg.adapter)  # also makes only this adapter trainable
            params = [p for p in model.parameters() if p.requires_grad]
            if not params:
                raise TrainingError(f"Adapter {cfg.adapter!r} has no trainable parameters.")
            self._state = TrainerState.create(self, params, model)
            if cfg.resume_from is not None:
                load_checkpoint(self._state, self._checkpoint_to_resume(), model, cfg.adapter)
            model.eval()
        except BaseException:
            if self._new_adapter:
                manager._discard_on_worker(cfg.adapter)
            raise

    def _checkpoint_to_resume(self) -> Path:
        cfg = self.config
        if cfg.resume_from != "latest":
            path = Path(cfg.resume_from).expanduser()
        else:
            found = sorted(
                (self.output_dir / "checkpoints").glob("step-*"),
                key=lambda p: int(p.name.split("-")[1]),
            )
            if not found:
                raise TrainingError(
                    f'resume_from="latest" but {self.output_dir / "checkpoints"} has no '
                    "checkpoints; start without resume_from."
                )
            path = found[-1]
        if not (path / "trainer_state.pt").is_file():
            raise TrainingError(
                f"{str(path)!r} is not a training checkpoint (no trainer_state.pt). Give a "
                f"directory under {self.output_dir / 'checkpoints'} or 'latest'."
            )
        return path

    @property
    def output_dir(self) -> Path:
        if self.config.output_dir is not None:
            return Path(self.config.output_dir).expanduser().resolve()
        base = self._manager._adapters_dir() or Path.cwd() / "adapters"
        return (base / self.config.adapter).resolve()

    # ----- phase 3: worker, one micro-batch per call
    def step(self) -> bool:
        """One micro-batch (and an optimizer step every ``grad_accum``); False when finished."""
        if self._future.done():
            return False
        try:
            if self._cancel.is_set():
                self._finish(cancelled=True)
                return False
            state = self._state
            assert state is not None
            model = self._manager._model()
            if model.active_adapters != [self.config.adapter]:
                model.base_model.set_adapter(self.config.adapter)
            # Loading or combining other adapters between steps may refreeze parameters.
            for param in state.params:
                if not param.requires_grad:
                    param.requires_grad_(True)
            model.train()
            try:
                stepped = state.micro_step(model)
            finally:
                model.eval()
            if stepped:
                self._after_optimizer_step(model)
            if state.step >= self.total_steps:
                self._finish(cancelled=False)
                return False
            return True
        except BaseException as exc:
            self.fail(exc)
            return False

    def _after_optimizer_step(self, model: Any) -> None:
        cfg, state = self.config, self._state
        assert state is not None
        elapsed = time.perf_counter() - state.started
        done = state.step - state.first_step
        eta = elapsed / done * (self.total_steps - state.step) if done else None
        self._emit(
            TrainingEvent(
                kind="step",
                step=state.step,
                max_steps=self.total_steps,
                loss=state.last_loss,
                learning_rate=state.last_lr,
                tokens_per_s=state.last_tokens_per_s,
                eta_s=eta,
                elapsed_s=elapsed,
                epoch=state.epoch,
            )
        )
        if cfg.eval_every and self._val and state.step % cfg.eval_every == 0:
            self._evaluate(model)
        if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
            path = self.output_dir / "checkpoints" / f"step-{state.step}"
            save_checkpoint(state, path, model, cfg.adapter)
            self._emit(self._event("checkpoint", path=str(path)))

    def _evaluate(self, model: Any) -> float | None:
        if not self._val or self._state is None:
            return None
        loss = self._state.evaluate(model, self._val)
        self._emit(self._event("eval", eval_loss=loss))
        return loss

    def _event(self, kind: str, **fields: Any) -> TrainingEvent:
        state = self._state
        assert state is not None
        return TrainingEvent(
            kind=kind,
            step=state.step,
            max_steps=self.total_steps,
            loss=state.last_loss,
            learning_rate=state.last_lr,
            elapsed_s=time.perf_counter() - state.started,
            epoch=state.epoch,
            **fields,
        )

    # ----- phase 4: finish / fail
    def _finish(self, cancelled: bool) -> None:
        from mp13_engine._adapters import AdapterInfo, _info_from_config
        from mp13_engine._training._config import config_to_dict

        cfg, state, manager = self.config, self._state, self._manager
        assert state is not None
        model = manager._model()
        state.close(model)
        eval_loss = None
        if self._val and (state.step > state.first_step or not cancelled):
            eval_loss = self._evaluate(model)
        path: str | None = None
        if state.step > 0:
            manager._invalidate_on_worker(cfg.adapter)
            info: AdapterInfo = _info_from_config(
                cfg.adapter, None, model.peft_config[cfg.adapter], "trained"
            )
            manager._register_on_worker(info)
            metadata = {
                "training": {
                    "config": config_to_dict(cfg),
                    "steps": state.step,
                    "final_loss": state.last_loss,
                    "eval_loss": eval_loss,
                    "train_rows": len(self._train),
                    "validation_rows": len(self._val),
                    "truncated_rows": self._counts["truncated"],
                    "dropped_rows": self._counts["dropped"],
                    "cancelled": cancelled,
                }
            }
            path = str(manager._save_on_worker(cfg.adapter, self.output_dir, metadata))
        elif self._new_adapter:
            manager._discard_on_worker(cfg.adapter)
        result = TrainingResult(
            adapter=cfg.adapter,
            path=path,
            steps=state.step,
            final_loss=state.last_loss,
            eval_loss=eval_loss,
            cancelled=cancelled,
            train_rows=len(self._train),
            truncated_rows=self._counts["truncated"],
            dropped_rows=self._counts["dropped"],
            train_tokens=state.tokens_seen,
            elapsed_s=time.perf_counter() - state.started,
        )
        self._emit(self._event("done", eval_loss=eval_loss, path=path))
        self._future.set_result(result)
        self._close_events()

    def fail(self, exc: BaseException) -> None:
        """The job raised, or the engine closed: clean up and fail ``result()``."""
        if self._future.done():
            return
        with contextlib.suppress(Exception):
            model = self._manager._model()
            if self._state is not None:
                self._state.close(model)
            model.eval()
            if self._new_adapter:
                self._manager._discard_on_worker(self.config.adapter)
        if not isinstance(exc, Mp13Error):
            err = TrainingError(
                f"Training adapter {self.config.adapter!r} failed: {type(exc).__name__}: {exc}. "
                "The engine keeps serving; fix the cause and start a new job."
            )
            err.__cause__ = exc
            exc = err
        self._future.set_exception(exc)
        self._close_events()

    def _emit(self, event: TrainingEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def _close_events(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def start_training(engine: Any, config: TrainingConfig) -> TrainingJob:
    """Validate and prepare ``config``, set the adapter up on the worker, submit the job."""
    if not isinstance(config, TrainingConfig):
        raise ConfigError(
            f"engine.train needs a TrainingConfig, got {type(config).__name__}; build one with "
            "TrainingConfig(adapter=..., dataset=...)."
        )
    job = TrainingJob(engine, config)
    job._prepare()
    engine._run_on_worker(job._setup_on_worker)
    engine._submit_job(job)
    return job
