# SPDX-License-Identifier: Apache-2.0
"""A training job's output folder: whether the adapter can be saved there, what earlier
runs left in it, and which of its checkpoints a run resumes from.

The folder (``TrainingJob.output_dir``) holds the saved adapter and a
``checkpoints/step-<n>`` folder per checkpoint, each with its ``trainer_state.pt``.

Invariants: everything here runs before the job's first step and raises from
``engine.train`` (the folder is checked on the caller's thread, the checkpoint is found
during setup on the worker), so a folder that cannot take the adapter, or holds another
run's work that this job would overwrite, is a ``ConfigError`` up front, never a failure
after the last step; a checkpoint to resume that is not one is a ``TrainingError`` that
says what to give instead. Nothing here writes to disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from mp13_engine._errors import ConfigError, TrainingError
from mp13_engine._training._config import TrainingConfig


def check_output_dir(target: Path, config: TrainingConfig) -> None:
    """ConfigError now, not after the last step, when the adapter cannot be saved to ``target``
    (the job's ``output_dir``)."""
    existing = next(p for p in (target, *target.parents) if p.exists())
    problem = None
    if not existing.is_dir():
        problem = "is a file" if existing == target else f"is under a file, {str(existing)!r}"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"cannot be written ({str(existing)!r} is not writable)"
    if problem is not None:
        raise ConfigError(
            f"The adapter would be saved to {str(target)!r}, which {problem}. Set "
            "TrainingConfig.output_dir (or EngineConfig.adapters_dir) to a folder you can "
            "write, new or one to write the adapter's files into."
        )
    held = earlier_work(target)
    if held and config.resume_from is None and not config.overwrite:
        raise ConfigError(
            f"The adapter would be saved to {str(target)!r}, which already holds {held} of "
            "another run; this job would overwrite them. Resume that run (resume_from="
            '"latest" or a checkpoint), save this one elsewhere (TrainingConfig.output_dir, '
            "a new folder), or set overwrite=True to replace them."
        )


def earlier_work(target: Path) -> str:
    """What of another run's work ``target`` holds ("" when nothing): a saved adapter and/or
    checkpoints (``checkpoints/step-<n>`` folders)."""
    held = []
    if (target / "adapter_config.json").is_file():
        held.append("a saved adapter")
    checkpoints = target / "checkpoints"
    try:
        if any(p.name.startswith("step-") for p in checkpoints.iterdir()):
            held.append("checkpoints")
    except OSError:  # none there (or unreadable: the writable check above covers saving)
        pass
    return " and ".join(held)


def checkpoint_to_resume(output_dir: Path, resume_from: str) -> Path:
    """The checkpoint folder ``resume_from`` names (a path, or "latest" under ``output_dir``);
    TrainingError when there is none or it is not a training checkpoint."""
    checkpoints = output_dir / "checkpoints"
    if resume_from != "latest":
        path = Path(resume_from).expanduser()
    else:
        # The most recently saved, not the highest step: a new run into the same output_dir
        # leaves an earlier run's higher steps behind. Only step-<n> folders with a state.
        latest = max(
            (
                (state.stat().st_mtime_ns, int(p.name[5:]), p)
                for p in checkpoints.glob("step-*")
                if p.name[5:].isdigit() and (state := p / "trainer_state.pt").is_file()
            ),
            default=None,
        )
        if latest is None:
            raise TrainingError(
                f'resume_from="latest" but {checkpoints} has no checkpoints; start without '
                "resume_from."
            )
        path = latest[2]
    if not (path / "trainer_state.pt").is_file():
        saved = (
            " It is a saved adapter: to train it further, load it with "
            "engine.adapters.load(path, name=...) and set continue_training=True."
            if (path / "adapter_config.json").is_file()
            else ""
        )
        raise TrainingError(
            f"{str(path)!r} is not a training checkpoint (no trainer_state.pt). Give a "
            f"directory under {checkpoints} or 'latest'.{saved}"
        )
    return path
