# SPDX-License-Identifier: Apache-2.0
"""The adapter a training job trains: whether its name can be trained now, and the LoRA
config a new one is created with.

Concept
    A job trains a new adapter under ``config.adapter``, or, with ``continue_training``,
    the one loaded under that name (``resume_from`` may restore a checkpoint into either).
    ``name_problem`` says when the name and what is loaded under it do not fit that;
    ``lora_config`` is the PEFT config of a new adapter.

Invariants: nothing here touches the engine or the model; the job asks ``name_problem``
on the caller's thread and again on the worker (the adapter may be loaded or unloaded in
between), so a name that cannot be trained is a ``TrainingError`` from ``engine.train``.
"""

from __future__ import annotations

from typing import Any

from mp13_engine._errors import TrainingError
from mp13_engine._training._config import TrainingConfig


def name_problem(cfg: TrainingConfig, loaded: bool) -> TrainingError | None:
    """Why the adapter's name cannot be trained now (loaded, or not loaded to continue)."""
    if loaded and not cfg.continue_training and cfg.resume_from is not None:
        # What a cancelled (or ended) run leaves: it installed what it had trained, so
        # the name is taken when its checkpoint is resumed; "pick another name" would
        # not resume that run, and its adapter's output_dir moves with the name.
        return TrainingError(
            f"An adapter named {cfg.adapter!r} is already loaded (a run that is cancelled "
            "or ends installs what it trained), so resuming its checkpoint would replace "
            f"it. To resume, unload it first (engine.adapters.unload({cfg.adapter!r})) and "
            "start this job again, or set continue_training=True to resume into the loaded "
            "adapter (the checkpoint's weights replace its own)."
        )
    if loaded and not cfg.continue_training:
        return TrainingError(
            f"An adapter named {cfg.adapter!r} is already loaded. Pick another name, "
            "unload it, or set continue_training=True to train it further."
        )
    if not loaded and cfg.continue_training:
        return TrainingError(
            f"continue_training=True but no adapter {cfg.adapter!r} is loaded; load it "
            "first with engine.adapters.load(path, name=...)."
        )
    return None


def lora_config(cfg: TrainingConfig) -> Any:
    """The ``peft.LoraConfig`` of a new adapter (the caller checks its targets exist)."""
    from peft import LoraConfig

    targets = cfg.target_modules
    if isinstance(targets, str) and targets != "all-linear":
        targets = (targets,)  # one module name; PEFT would read a bare str as a regex
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]  # PEFT types it int; floats work
        lora_dropout=cfg.lora_dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
