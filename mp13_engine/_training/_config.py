# SPDX-License-Identifier: Apache-2.0
"""Training values: ``TrainingConfig`` in, ``TrainingEvent`` progress, ``TrainingResult`` out.

Torch-free so ``mp13_engine`` can export them eagerly. ``TrainingConfig`` is
validated when constructed: every invalid field raises ``ConfigError`` naming
the field and the allowed values, so a bad config never reaches the worker.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from mp13_engine._adapter_files import adapter_name_problem
from mp13_engine._config import (
    DTYPES,
    Validator,
    flag,
    invalid,
    is_int,
    is_number,
    one_of,
    optional_str,
    path_str,
    positive_int,
    rule,
)
from mp13_engine._errors import ConfigError, ConfigKeywordError
from mp13_engine._types import StrEnum
from mp13_toolbox import strict_keywords

SCHEDULERS = ("constant", "constant_with_warmup", "cosine", "linear")
OVERFLOW = ("truncate", "drop")
LOSS_ON = ("assistant", "all")
#: Training data: a .json/.jsonl file, or the rows themselves (dicts).
Dataset = str | os.PathLike[str] | Sequence[Mapping[str, Any]]
_non_negative_int = rule(lambda v: is_int(v) and v >= 0, "an integer >= 0")
_positive_float = rule(lambda v: is_number(v) and v > 0 and math.isfinite(v), "a finite number > 0")


def _fraction(upper_open: bool) -> Validator:
    return rule(
        lambda v: is_number(v) and v >= 0 and (v < 1 if upper_open else v <= 1),
        f"a number with {'0 <= x < 1' if upper_open else '0 <= x <= 1'}",
    )


#: Largest ``TrainingConfig.seed``: the trainer derives per-epoch and per-step seeds from it
#: (``seed * 1_000_003 + n``), which must stay within torch's 64-bit seeds.
SEED_MAX = 2**32 - 1


def _targets(value: Any) -> Any:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        return value  # a string, or something the validator refuses by name
    return tuple(value)


_opt_path = optional_str("a directory path (a str or os.PathLike)")
_seed = rule(
    lambda v: is_int(v) and 0 <= v <= SEED_MAX, f"an integer from 0 to 2**32-1 ({SEED_MAX})"
)


_targets_rule = rule(
    lambda v: (
        (isinstance(v, str) and bool(v))
        or (isinstance(v, tuple) and bool(v) and all(isinstance(t, str) and t for t in v))
    ),
    '"all-linear" or a non-empty list of module names',
)


def _check_adapter(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    problem = adapter_name_problem(value)
    if problem is not None:
        raise invalid(
            inst,
            attribute.name,
            value,
            f"a plain name such as 'my-adapter'; {problem}. The adapter is saved to "
            "adapters_dir/<name> (./adapters/<name> without adapters_dir); to save it "
            "somewhere else, set output_dir",
        )


def _check_dataset(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "validation":
        return
    if not isinstance(value, (str, os.PathLike, list, tuple)):
        raise invalid(
            inst, attribute.name, type(value).__name__, "a .json/.jsonl path or a list of dict rows"
        )


@strict_keywords(ConfigKeywordError)
@attrs.frozen(kw_only=True)
class TrainingConfig:
    """A LoRA (or QLoRA, on a 4/8-bit base) training job on the engine's model.

    Data: ``dataset`` is a ``.json``/``.jsonl`` file or a list of rows, each
    ``{"messages": [...], "tools": [...]?}``, ``{"prompt": ..., "completion": ...}``
    or ``{"text": ...}``. With ``loss_on="assistant"`` (default) only assistant
    tokens (messages) or the completion count in the loss. ``validation`` (rows
    or a file) or ``validation_split`` (a fraction held out, seeded), not both,
    gives an eval loss at the end and every ``eval_every`` steps (which needs one).

    Length: ``max_steps`` optimizer steps, or ``epochs`` passes when it is None.
    A step is ``grad_accum`` micro-batches of ``batch_size`` rows. Rows longer
    than ``max_seq_len`` tokens are cut (``overflow="truncate"``) or left out
    (``"drop"``); ``loss_on="all"`` counts every token in the loss. ``shuffle``
    reorders the rows each epoch, seeded by ``seed``.

    Optimisation: AdamW at ``learning_rate`` with ``weight_decay``, gradients
    clipped to ``max_grad_norm``; ``scheduler`` is one of ``"linear"``,
    ``"cosine"``, ``"constant"``, ``"constant_with_warmup"`` after
    ``warmup_steps``. LoRA: rank ``lora_r``, scale ``lora_alpha``, dropout
    ``lora_dropout``, on ``target_modules`` (``"all-linear"`` or module names).
    ``precision``: ``"bfloat16"``/``"float16"`` train under autocast in that
    dtype, ``"auto"``/``"float32"`` in the model's own dtype. A bitsandbytes model
    loaded in one half dtype cannot train on the CPU under autocast to the other
    (``engine.train`` raises ``ConfigError`` saying what to use instead).
    ``gradient_checkpointing`` trades compute for activation memory.
    ``eval_batch_size``: rows per validation forward.

    Adapter: a new one named ``adapter`` (an error if loaded, unless
    ``continue_training=True``, which trains the loaded adapter further; its
    own rank and targets then apply). Saved in PEFT format to ``output_dir``
    (default: ``adapters_dir/adapter``, else ``./adapters/adapter``) with
    checkpoints every ``checkpoint_every`` steps (in ``output_dir/checkpoints/step-<n>``);
    ``resume_from`` a checkpoint directory (or ``"latest"``, the most recently saved
    one there) resumes optimizer, scheduler and data order (a cancelled run leaves its
    adapter loaded: unload it first, or resume into it with ``continue_training=True``,
    the checkpoint's weights replacing its own); its LoRA settings and
    base model must be this job's, and its step below the job's last. Its data order
    must be too: another ``batch_size``, ``grad_accum``, ``seed``, ``shuffle`` or
    dataset (rows after ``max_seq_len``/``overflow``/``loss_on``) is refused, unless
    ``resume_with_changes=True``, which keeps the checkpoint's weights, optimizer and
    step and goes on from that step's place in this job's data order. A job that
    does not resume refuses an ``output_dir`` already holding a saved adapter or
    checkpoints (another run's work would be overwritten) unless ``overwrite=True``,
    which lets it replace the saved adapter and any checkpoint of the same step.

    Types are strict: flags take ``True``/``False`` (not ``"no"``), paths a
    ``str`` or ``os.PathLike``, and ``seed`` an integer from 0 to 2**32-1.
    """

    adapter: str = attrs.field(validator=_check_adapter)
    dataset: Dataset = attrs.field(converter=path_str, validator=_check_dataset, eq=False)
    validation: Dataset | None = attrs.field(
        default=None, converter=path_str, validator=_check_dataset, eq=False
    )
    validation_split: float = attrs.field(default=0.0, validator=_fraction(upper_open=True))
    lora_r: int = attrs.field(default=8, validator=positive_int)
    lora_alpha: float = attrs.field(default=16.0, validator=_positive_float)
    lora_dropout: float = attrs.field(default=0.0, validator=_fraction(upper_open=True))
    target_modules: str | tuple[str, ...] = attrs.field(
        default="all-linear", converter=_targets, validator=_targets_rule
    )
    max_steps: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_int)
    )
    epochs: float = attrs.field(default=1.0, validator=_positive_float)
    learning_rate: float = attrs.field(default=2e-4, validator=_positive_float)
    scheduler: str = attrs.field(default="linear", validator=one_of(SCHEDULERS))
    warmup_steps: int = attrs.field(default=0, validator=_non_negative_int)
    weight_decay: float = attrs.field(default=0.0, validator=_fraction(upper_open=False))
    max_grad_norm: float = attrs.field(default=1.0, validator=_positive_float)
    grad_accum: int = attrs.field(default=1, validator=positive_int)
    batch_size: int = attrs.field(default=4, validator=positive_int)
    max_seq_len: int = attrs.field(default=1024, validator=positive_int)
    overflow: str = attrs.field(default="truncate", validator=one_of(OVERFLOW))
    loss_on: str = attrs.field(default="assistant", validator=one_of(LOSS_ON))
    seed: int = attrs.field(default=0, validator=_seed)
    shuffle: bool = attrs.field(default=True, validator=flag)
    gradient_checkpointing: bool = attrs.field(default=False, validator=flag)
    precision: str = attrs.field(default="auto", validator=one_of(DTYPES))
    continue_training: bool = attrs.field(default=False, validator=flag)
    output_dir: str | None = attrs.field(default=None, converter=path_str, validator=_opt_path)
    overwrite: bool = attrs.field(default=False, validator=flag)
    checkpoint_every: int = attrs.field(default=0, validator=_non_negative_int)
    resume_from: str | None = attrs.field(default=None, converter=path_str, validator=_opt_path)
    resume_with_changes: bool = attrs.field(default=False, validator=flag)
    eval_every: int = attrs.field(default=0, validator=_non_negative_int)
    eval_batch_size: int = attrs.field(default=8, validator=positive_int)

    def __attrs_post_init__(self) -> None:
        """Checks across fields (each field's own check has run)."""
        if self.validation is not None and self.validation_split > 0:
            raise ConfigError(
                f"TrainingConfig has both validation and validation_split="
                f"{self.validation_split}; set one: validation (rows or a .json/.jsonl file) "
                "or validation_split (a fraction of dataset held out)."
            )
        if self.resume_with_changes and self.resume_from is None:
            raise ConfigError(
                "TrainingConfig.resume_with_changes=True only applies when resuming; set "
                'resume_from (a checkpoint directory or "latest"), or leave it False.'
            )
        if self.eval_every and self.validation is None and self.validation_split == 0:
            raise ConfigError(
                f"TrainingConfig.eval_every={self.eval_every} needs validation data, or no "
                "eval loss is ever computed; set validation (rows or a .json/.jsonl file) or "
                "validation_split (a fraction of dataset held out)."
            )


class TrainingEventKind(StrEnum):
    """What a :class:`TrainingEvent` reports (a ``str``: ``event.kind == "step"`` holds too)."""

    QUEUED = "queued"  # set up and waiting for its turn: jobs run one at a time (first event)
    STARTED = "started"  # its turn came: the first step is being taken now
    STEP = "step"  # an optimizer step was taken (loss, learning rate, speed, ETA)
    EVAL = "eval"  # the validation loss was computed (``eval_loss``)
    CHECKPOINT = "checkpoint"  # a checkpoint was saved (``path``)
    DONE = "done"  # the job finished or was cancelled; the last event (``path``, ``eval_loss``)


@attrs.frozen(kw_only=True)
class TrainingEvent:
    """Progress of a job: what happened (``kind``) and where the job stands."""

    kind: TrainingEventKind
    step: int
    max_steps: int
    loss: float | None = None
    learning_rate: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    elapsed_s: float = 0.0
    epoch: float = 0.0
    eval_loss: float | None = None
    path: str | None = None  # checkpoint / final directory for "checkpoint" and "done"


@attrs.frozen(kw_only=True)
class TrainingResult:
    """The outcome of a job; the adapter is loaded in the engine and saved at ``path``.

    ``path`` is None, and nothing was kept, when the job was cancelled before its
    first optimizer step (``steps == 0``, ``cancelled``). ``final_loss``: the loss
    of the last optimizer step; ``eval_loss``: the last validation loss, when
    there is validation data. ``train_rows``: rows trained on, after the
    validation split and dropped rows; ``truncated_rows``: rows (training and
    validation) cut to ``max_seq_len``; ``dropped_rows``: rows left out, too long
    with ``overflow="drop"`` or with no token to learn from.
    """

    adapter: str
    path: str | None
    steps: int
    final_loss: float | None
    eval_loss: float | None = None
    cancelled: bool = False
    train_rows: int = 0
    truncated_rows: int = 0
    dropped_rows: int = 0
    train_tokens: int = 0
    elapsed_s: float = 0.0


def config_to_dict(config: TrainingConfig) -> dict[str, Any]:
    """JSON-ready dict of a config (an in-memory dataset becomes a row count)."""
    # Field by field, not attrs.evolve: a copy would rerun the cross-field checks, and every
    # field but the datasets is a plain JSON value already.
    out = {field.name: getattr(config, field.name) for field in attrs.fields(TrainingConfig)}
    for key in ("dataset", "validation"):
        value = out[key]
        out[key] = f"<{len(value)} rows>" if isinstance(value, (list, tuple)) else value
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def check_targets_exist(base: Any, targets: str | tuple[str, ...]) -> None:
    """ConfigError unless every target module name is a module (or leaf name) of ``base``."""
    if isinstance(targets, str):
        if targets == "all-linear":
            return
        targets = (targets,)
    names = {n for n, _ in base.named_modules()}
    leaves = {n.rsplit(".", 1)[-1] for n in names}
    unknown = [t for t in targets if t not in leaves and t not in names]
    if unknown:
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in base.named_modules() if hasattr(m, "in_features")}
        )
        raise ConfigError(
            f"TrainingConfig.target_modules names {unknown}, which this model does not have. "
            f'Use "all-linear" or some of its linear modules: {linear}.'
        )
