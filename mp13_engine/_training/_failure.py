# SPDX-License-Identifier: Apache-2.0
"""What a failed training job tells its caller: the error ``result()`` raises.

Concept
    A job fails when saving the trained adapter fails (``save_failed``), or when a step,
    its setup or the engine's close ends it (``job_failed``). Either way the engine keeps
    serving, and the error says what was kept and how to go on.

Invariants: each error is an ``Mp13Error`` (a foreign exception becomes a
``TrainingError``, chained to it) whose message names the adapter, what is kept (the
adapter still loaded, the last checkpoint) and what to do next; one that is already an
``Mp13Error`` keeps its type and message, the advice added. Nothing here touches the job,
the engine or the disk.
"""

from __future__ import annotations

from pathlib import Path

from mp13_engine._errors import TrainingError
from mp13_toolbox import Mp13Error


def save_failed(
    adapter: str, steps: int, output_dir: Path, exc: BaseException, loaded: bool
) -> TrainingError:
    """Saving the adapter trained for ``steps`` steps failed with ``exc`` (``loaded``: the
    trained adapter is still loaded, so requests can use it and it can be saved again)."""
    kept = (
        f"The trained adapter is loaded as {adapter!r} (requests can use it); "
        f"save it with engine.adapters.save({adapter!r}, path)."
        if loaded
        else "Nothing was kept; fix the cause and start a new job."
    )
    return TrainingError(
        f"Training adapter {adapter!r} took {steps} steps, but saving it "
        f"to {str(output_dir)!r} failed: {exc}. {kept}"
    )


def job_failed(exc: BaseException, adapter: str, last_checkpoint: Path | None) -> BaseException:
    """The error ``result()`` raises for a job that ``exc`` ended (chained to it)."""
    resume = ""
    if last_checkpoint is not None:
        resume = (
            f" Its last checkpoint, {str(last_checkpoint)!r}, is kept: to go on from "
            "there, start a job with the same settings and resume_from set to it (or to "
            '"latest", with the same output_dir).'
        )
    if not isinstance(exc, Mp13Error):
        err: BaseException = TrainingError(
            f"Training adapter {adapter!r} failed: {type(exc).__name__}: {exc}. "
            f"The engine keeps serving; fix the cause and start a new job.{resume}"
        )
    elif resume:
        # The same error type (each takes one message), the advice added.
        err = type(exc)(f"{str(exc).rstrip('.')}.{resume}")
    else:
        err = exc
    if err is not exc:
        err.__cause__ = exc
    return err
