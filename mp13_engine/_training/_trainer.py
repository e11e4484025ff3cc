# SPDX-License-Identifier: Apache-2.0
"""The training step you can read top to bottom: batching, one micro-step, checkpoints.

``Trainer`` runs the micro-steps of one job and owns what they change: the
optimizer, the scheduler, the data order and the counters. It knows the job's
config, rows and length, never the job or the engine. Invariants: ``micro``
counts micro-batches taken so far and determines everything about the next one
(which rows, the dropout seed), so a run resumed from a checkpoint continues
exactly where it stopped; ``step`` counts optimizer steps; the loss of a step
is the mean over all loss tokens of its ``grad_accum`` micro-batches (each
micro-batch's summed loss is divided by the window's token count before
``backward``).
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import math
import pickle
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from mp13_engine._adapter_files import METADATA_FILE
from mp13_engine._adapter_save import write_adapter_dir
from mp13_engine._compat import (
    drop_leaked_forward_hooks,
    peft_base_model,
    set_activation_checkpointing,
)
from mp13_engine._errors import TrainingError
from mp13_engine._training._config import TrainingConfig
from mp13_engine._training._render import TrainingRow
from mp13_toolbox import Mp13Error

_IGNORE = -100
_STATE_FILE = "trainer_state.pt"
#: ``TrainingConfig.precision`` values that train under autocast, and their dtypes.
_AUTOCAST = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def autocast_problem(model: Any, precision: str) -> str | None:
    """Why ``precision`` cannot train ``model``, or None when it can. Worker only.

    bitsandbytes' 4-bit and 8-bit layers return their own compute dtype whatever
    autocast asks for; on the CPU (seen with bitsandbytes 0.50, torch 2.13), a
    half-precision quantized model under autocast to the *other* half dtype then
    fails at its first forward ("Unexpected floating ScalarType in
    at::autocast::prioritize"), after the job was queued. Autocast to the model's
    own dtype, and any autocast of a float32 quantized model, train. Not checked on
    GPUs, where this was not seen.
    """
    autocast = _AUTOCAST.get(precision)
    weight = model.get_input_embeddings().weight
    dtype = weight.dtype
    if autocast is None or dtype not in _AUTOCAST.values() or dtype == autocast:
        return None
    if weight.device.type != "cpu":
        return None
    if not any(type(m).__module__.startswith("bitsandbytes") for m in model.modules()):
        return None
    own = str(dtype).removeprefix("torch.")
    return (
        f"TrainingConfig.precision={precision!r} cannot train this model: it is quantized "
        f"with bitsandbytes and computes in {own}, and on the CPU its layers ignore autocast, "
        f"so the forward would mix {own} and {precision} and fail. Use precision='auto' (or "
        f"{own!r}), or load the model with dtype={precision!r} or 'float32'."
    )


def batches(
    rows: Sequence[TrainingRow], pad_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 outside the mask).

    A row's ``array`` buffers are read in place (``torch.frombuffer``), not as one Python int
    a token; rows given as other int sequences are converted by ``TrainingRow``."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), _IGNORE, dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.ids)
        if n == 0:  # frombuffer refuses an empty buffer; the row is all padding
            continue
        ids[i, :n] = torch.frombuffer(row.ids, dtype=torch.int32)
        attn[i, :n] = 1
        mask = torch.frombuffer(row.mask, dtype=torch.uint8).bool()
        labels[i, :n] = torch.where(mask, ids[i, :n], _IGNORE)
    return {
        "input_ids": ids.to(device),
        "attention_mask": attn.to(device),
        "labels": labels.to(device),
    }


def _loss_sum(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    # A serving forward that failed may have left PEFT's adapter_names hooks behind
    # (``_compat``); a training forward passes no adapter_names and would get stale ones.
    drop_leaked_forward_hooks(model)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = out.logits[:, :-1, :].float()
    targets = batch["labels"][:, 1:].to(logits.device)  # a spread model's logits: its last device
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=_IGNORE,
        reduction="sum",
    )
    return loss, int((targets != _IGNORE).sum())


@attrs.define
class Trainer:
    """One job's micro-steps, and the optimizer, scheduler, data order and counters they change."""

    config: TrainingConfig
    rows: Sequence[TrainingRow]
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    device: torch.device
    cuda_devices: list[int]  # every GPU holding part of the model (their RNGs are forked)
    pad_id: int
    autocast: tuple[str, torch.dtype] | None  # (device type, dtype) to train under autocast
    grad_ckpt: bool  # whether this trainer turned gradient checkpointing on (close() undoes it)
    micro: int = 0
    step: int = 0
    first_step: int = 0
    tokens_seen: int = 0
    last_loss: float | None = None
    last_lr: float | None = None
    last_tokens_per_s: float | None = None
    started: float = attrs.field(factory=time.perf_counter)
    _orders: dict[int, list[int]] = attrs.field(factory=dict)
    _window: dict[str, float] = attrs.field(factory=dict)
    _data: dict[str, Any] | None = None  # data_settings(), once computed

    @classmethod
    def create(
        cls,
        config: TrainingConfig,
        rows: Sequence[TrainingRow],
        total_steps: int,
        params: list[torch.nn.Parameter],
        model: Any,
        pad_id: int,
    ) -> Trainer:
        """A trainer for ``rows`` that takes ``total_steps`` optimizer steps of ``params``."""
        from transformers import get_scheduler

        cfg = config
        optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        scheduler = get_scheduler(
            cfg.scheduler,
            optimizer,
            num_warmup_steps=cfg.warmup_steps,
            num_training_steps=total_steps,
        )
        device = model.get_input_embeddings().weight.device
        dtype = _AUTOCAST.get(cfg.precision)
        return cls(
            config=config,
            rows=rows,
            params=params,
            optimizer=optimizer,
            scheduler=scheduler,
            device=device,
            cuda_devices=cuda_devices(model),
            pad_id=pad_id,
            autocast=None if dtype is None else (device.type, dtype),
            grad_ckpt=False,
        )

    def begin(self, model: Any) -> None:
        """The job's turn has come: time from now, and turn gradient checkpointing on.

        Not at ``create``: a job set up while another trains shares the model, and would
        switch checkpointing for that job (and off again, were it cancelled first)."""
        self.started = time.perf_counter()
        if self.config.gradient_checkpointing and not self.grad_ckpt:
            set_activation_checkpointing(peft_base_model(model), True)
            self.grad_ckpt = True

    # ----- what a checkpoint's data position means
    def data_settings(self) -> dict[str, Any]:
        """What decides which rows micro-batch ``micro`` holds: saved with a checkpoint, and
        compared on resume (another batch size or dataset would make the saved position
        point at other rows: some repeated, some never seen). Computed once: rows and config
        never change."""
        if self._data is not None:
            return self._data
        cfg = self.config
        digest = hashlib.sha256()
        for row in self.rows:  # the rendered rows: max_seq_len, overflow and loss_on count too
            digest.update(len(row.ids).to_bytes(4, "little"))
            # 8-byte ids, as when rows were tuples: checkpoints saved then still compare equal.
            digest.update(array.array("q", row.ids).tobytes())
            digest.update(row.mask.tobytes())
        self._data = {
            "batch_size": cfg.batch_size,
            "grad_accum": cfg.grad_accum,
            "seed": cfg.seed,
            "shuffle": cfg.shuffle,
            "rows": len(self.rows),
            "rows_sha256": digest.hexdigest(),
        }
        return self._data

    # ----- data order
    @property
    def per_epoch(self) -> int:
        return math.ceil(len(self.rows) / self.config.batch_size)

    @property
    def epoch(self) -> float:
        return self.micro / self.per_epoch

    def _rows_for(self, micro: int) -> list[TrainingRow]:
        cfg = self.config
        epoch, index = divmod(micro, self.per_epoch)
        order = self._orders.get(epoch)
        if order is None:
            if cfg.shuffle:
                gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
                order = torch.randperm(len(self.rows), generator=gen).tolist()
            else:
                order = list(range(len(self.rows)))
            self._orders = {epoch: order}  # keep only the current epoch's order
        picked = order[index * cfg.batch_size : (index + 1) * cfg.batch_size]
        return [self.rows[i] for i in picked]

    # ----- the step
    def micro_step(self, model: Any) -> bool:
        """Forward + backward on the next micro-batch; True when it completed an optimizer step."""
        cfg = self.config
        position = self.micro % cfg.grad_accum
        if position == 0:
            window = range(self.micro, self.micro + cfg.grad_accum)
            n_loss = sum(r.n_loss - int(r.mask[0]) for m in window for r in self._rows_for(m))
            self._window = {"n_loss": max(n_loss, 1), "loss": 0.0, "tokens": 0, "compute": 0.0}
        rows = self._rows_for(self.micro)
        batch = batches(rows, self.pad_id, self.device)
        t0 = time.perf_counter()
        # Dropout draws from the global RNG: fork it and seed it per micro-batch, so results do
        # not depend on what else ran on this thread, and resumed runs draw the same masks.
        micro_seed = cfg.seed * 1_000_003 + self.micro + 1
        with seeded(micro_seed, self.cuda_devices), self._autocast():
            loss_sum, _ = _loss_sum(model, batch)
        if not torch.isfinite(loss_sum):
            raise TrainingError(
                f"The loss became {loss_sum.item()} at step {self.step + 1}. Lower learning_rate, "
                'or use precision="float32".'
            )
        (loss_sum / self._window["n_loss"]).backward()
        self._window["loss"] += float(loss_sum.detach())
        self._window["tokens"] += int(batch["attention_mask"].sum())
        self._window["compute"] += time.perf_counter() - t0
        self.micro += 1
        if position != cfg.grad_accum - 1:
            return False
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.last_lr = float(self.scheduler.get_last_lr()[0])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        compute = self._window["compute"] + time.perf_counter() - t1
        self.step += 1
        self.tokens_seen += int(self._window["tokens"])
        self.last_loss = self._window["loss"] / self._window["n_loss"]
        self.last_tokens_per_s = self._window["tokens"] / compute if compute > 0 else None
        return True

    def _autocast(self) -> Any:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.autocast[0], dtype=self.autocast[1])

    @torch.no_grad()
    def eval_sum(self, model: Any, rows: Sequence[TrainingRow]) -> tuple[float, int]:
        """Summed loss and loss-token count of one validation batch (eval mode, no dropout)."""
        model.eval()
        with self._autocast():
            loss_sum, n = _loss_sum(model, batches(rows, self.pad_id, self.device))
        return float(loss_sum), n

    def evaluate(self, model: Any, rows: Sequence[TrainingRow]) -> float:
        """Mean loss per loss token over ``rows``, all at once (the job's final evaluation)."""
        size = self.config.eval_batch_size
        total, count = 0.0, 0
        for i in range(0, len(rows), size):
            loss_sum, n = self.eval_sum(model, rows[i : i + size])
            total += loss_sum
            count += n
        return total / max(count, 1)

    def close(self, model: Any) -> None:
        """Leave the model as serving expects it: eval mode, no gradient checkpointing."""
        model.eval()
        self.optimizer.zero_grad(set_to_none=True)
        if self.grad_ckpt:
            set_activation_checkpointing(peft_base_model(model), False)
            self.grad_ckpt = False


def save_checkpoint(trainer: Trainer, path: Path, model: Any, adapter: str) -> None:
    """Adapter weights (PEFT format) + optimizer/scheduler/counters in ``trainer_state.pt``.

    Written into a hidden sibling folder (``.step-<n>.partial``) and renamed into place when
    complete, so a process that dies mid-save, or a disk that fills up, never leaves a
    ``step-<n>`` folder that ``resume_from="latest"`` would pick and fail to load. A failed save
    is a ``TrainingError`` that names the earlier checkpoints as kept."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        shutil.rmtree(partial, ignore_errors=True)  # left by a process that died mid-save
        write_adapter_dir(model, adapter, partial, {"checkpoint_step": trainer.step})
        torch.save(
            {
                "optimizer": trainer.optimizer.state_dict(),
                "scheduler": trainer.scheduler.state_dict(),
                "micro": trainer.micro,
                "step": trainer.step,
                "tokens_seen": trainer.tokens_seen,
                "last_loss": trainer.last_loss,
                "data": trainer.data_settings(),
            },
            partial / _STATE_FILE,
        )
        if path.exists():  # overwrite=True: another run's checkpoint of the same step
            shutil.rmtree(path)
        partial.rename(path)
    # torch.save reports a full disk as RuntimeError ("PytorchStreamWriter failed writing").
    except (OSError, RuntimeError, Mp13Error) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise TrainingError(
            f"Saving the checkpoint of step {trainer.step} to {str(path)!r} failed: "
            f"{_first_lines(exc)}. Any earlier checkpoint is kept as it was; free disk space "
            "(or set output_dir to a folder with room) and resume from the last one."
        ) from exc


def load_checkpoint(trainer: Trainer, path: Path, model: Any, adapter: str) -> None:
    """Restore what :func:`save_checkpoint` wrote into a freshly set-up trainer."""
    from peft import set_peft_model_state_dict
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    mismatch = _settings_mismatch(path, model, adapter)
    if mismatch:
        raise TrainingError(
            f"Cannot resume from checkpoint {str(path)!r}: it was saved with {mismatch}. Resume "
            "with the LoRA settings of the run that saved it, on the same base model, or start "
            "without resume_from."
        )
    try:
        # Both files read before the model is touched: a refusal leaves a loaded adapter as it was.
        weights = load_file(str(path / "adapter_model.safetensors"))
        saved = torch.load(str(path / _STATE_FILE), map_location=trainer.device, weights_only=True)
        if not isinstance(saved, dict):
            raise TypeError(f"{_STATE_FILE} holds a {type(saved).__name__}, not a trainer state")
        changed = _data_changes(saved.get("data"), trainer.data_settings())
        if changed and not trainer.config.resume_with_changes:
            raise _ChangedDataError(changed)
        set_peft_model_state_dict(model, weights, adapter_name=adapter)
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.scheduler.load_state_dict(saved["scheduler"])
    except _ChangedDataError as exc:
        raise TrainingError(
            f"Cannot resume from checkpoint {str(path)!r}: it was saved by a run with "
            f"{exc.args[0]}. Its step counts micro-batches of that run's data order, which "
            "these settings would not continue (rows repeated or never seen). Resume with that "
            "run's batch_size, grad_accum, seed, shuffle and dataset (the rows after "
            "max_seq_len, overflow and loss_on), or set resume_with_changes=True to go on from "
            "its weights, optimizer and step with this job's settings."
        ) from None
    # A damaged file raises what its reader raises: pickle's and safetensors' own errors too.
    except (
        OSError,
        KeyError,
        RuntimeError,
        TypeError,  # a file torch reads, holding something other than a trainer state
        ValueError,
        pickle.UnpicklingError,
        SafetensorError,
    ) as exc:
        raise TrainingError(
            f"Cannot resume from checkpoint {str(path)!r}: {_first_lines(exc)}. It must come "
            "from a job with the same LoRA settings on the same base model; if it is damaged "
            "(a save cut short), resume from an earlier step-<n> folder next to it."
        ) from exc
    trainer.micro, trainer.step = int(saved["micro"]), int(saved["step"])
    if changed:  # resume_with_changes: the next step starts a window of this job's data order
        trainer.micro = trainer.step * trainer.config.grad_accum
    trainer.first_step = trainer.step
    trainer.tokens_seen = int(saved["tokens_seen"])
    trainer.last_loss = saved["last_loss"]


class _ChangedDataError(Exception):
    """Internal: the checkpoint's data settings differ (args[0] says how); never escapes."""


def _data_changes(saved: Any, current: dict[str, Any]) -> str:
    """How ``current`` data settings differ from a checkpoint's (``""``: the same, or a
    checkpoint saved before they were recorded, which cannot be compared)."""
    if not isinstance(saved, dict):
        return ""
    found = [
        f"{key}={saved[key]!r} (this job: {current[key]!r})"
        for key in ("batch_size", "grad_accum", "seed", "shuffle")
        if key in saved and saved[key] != current[key]
    ]
    if saved.get("rows") != current["rows"]:
        found.append(f"{saved.get('rows')} training rows (this job: {current['rows']})")
    elif saved.get("rows_sha256") != current["rows_sha256"]:
        found.append("other training rows (the same count, other content)")
    return ", ".join(found)


def _settings_mismatch(path: Path, model: Any, adapter: str) -> str | None:
    """How the checkpoint's saved LoRA settings and base model differ from this job's, if
    they do (a rank or target mismatch would otherwise surface as PyTorch's per-tensor
    size-mismatch list, one line per weight); None when they match or cannot be read."""
    saved, meta = _json_object(path / "adapter_config.json"), _json_object(path / METADATA_FILE)
    current = model.peft_config[adapter]
    base_type = peft_base_model(model).config.model_type
    found = []
    if meta.get("model_type") and base_type and meta["model_type"] != base_type:
        found.append(f"a {meta['model_type']} base model (this engine runs {base_type})")
    if saved.get("r") is not None and saved["r"] != current.r:
        found.append(f"lora_r={saved['r']} (this job: {current.r})")

    def leaves(targets: Any) -> set[str] | None:
        if isinstance(targets, (list, tuple, set)):
            return {str(t).rsplit(".", 1)[-1] for t in targets}
        return None  # a pattern such as "all-linear": nothing to compare

    old, new = leaves(saved.get("target_modules")), leaves(current.target_modules)
    if old is not None and new is not None and old != new:
        found.append(f"target_modules={sorted(old)} (this job: {sorted(new)})")
    return ", ".join(found) or None


def _json_object(file: Path) -> dict[str, Any]:
    """A JSON object file's content; {} when missing or damaged (the loader reports those)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _first_lines(exc: BaseException, keep: int = 3) -> str:
    """The start of an error's text (PyTorch's state-dict errors list every tensor)."""
    lines = str(exc).strip().splitlines()
    more = len(lines) - keep
    return " ".join(line.strip() for line in lines[:keep]) + (
        f" (and {more} more lines)" if more > 0 else ""
    )


@contextlib.contextmanager
def seeded(seed: int, devices: list[int]) -> Iterator[None]:
    """Run with the global torch RNG (CPU and ``devices``) seeded to ``seed``, then restore it."""
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def cuda_devices(model: Any) -> list[int]:
    """The GPU indices holding any parameter of ``model`` (several for a spread model)."""
    return sorted(
        {
            p.device.index if p.device.index is not None else torch.cuda.current_device()
            for p in model.parameters()
            if p.device.type == "cuda"
        }
    )
