# SPDX-License-Identifier: MIT
"""Which model the REPL loads: a configured path, the built-in demo model, or a tiny one.

``config.model`` is a local folder or cached hub id, or one of two built-in names that
need no download: ``demo`` (also when unset) — ``mp13_engine.testing.demo_model_path()``,
a tiny model trained to answer a handful of prompts and call a tool — and ``tiny`` — a
random tiny chatml model (starts fastest; prints gibberish; used by the end-to-end
test). An existing folder of the same name wins over a built-in name. While the demo
builder is not available, ``demo`` falls back to ``tiny`` and says so. Built models are
cached under ``$MP13_CACHE_DIR`` (default ``~/.cache/mp13``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import attrs

from mp13chat._config import DEMO_MODEL, TINY_MODEL


@attrs.frozen
class ModelChoice:
    """A resolved model: what to load, how to name it, and what the user must know."""

    path: str
    label: str
    note: str | None = None  # shown in the banner (e.g. "random weights")
    demo: bool = False  # the built-in demo model (trained to show a tool round)


def cache_dir() -> Path:
    """Where built-in models are cached (``$MP13_CACHE_DIR`` or ``~/.cache/mp13``)."""
    env = os.environ.get("MP13_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mp13"


def is_builtin(model: str | None) -> bool:
    return model in (None, DEMO_MODEL, TINY_MODEL) and not (model and Path(model).exists())


def resolve_model(model: str | None) -> ModelChoice:
    """Build (once, cached) or locate the model named by ``model``; may take seconds."""
    if not is_builtin(model):
        assert model is not None
        return ModelChoice(path=model, label=model)
    from mp13_engine import testing  # imports torch: only when a built-in model is used

    if model != TINY_MODEL:
        demo = getattr(testing, "demo_model_path", None)
        if demo is not None:
            prompts = [p for p, _ in getattr(testing, "DEMO_PROMPTS", ())][:3]
            tries = ", ".join(repr(p) for p in [*prompts, "what is 17*23?"])
            return ModelChoice(
                path=str(demo()),
                label="built-in demo model",
                demo=True,
                note=f"a tiny model trained on a few prompts; try {tries}",
            )
    dest = cache_dir() / f"tiny-chatml-{getattr(testing, 'BUILD_VERSION', 0)}"
    if not (dest / "config.json").exists():
        _build_atomically(dest, lambda tmp: testing.build_tiny_model(tmp, family="chatml", seed=0))
    note = "random weights: replies are gibberish; use --model PATH for a real model"
    if model != TINY_MODEL:
        note = "the demo model is not available in this build; " + note
    return ModelChoice(path=str(dest), label="tiny random chatml model", note=note)


def _build_atomically(dest: Path, build: Callable[[Path], object]) -> None:
    # Two REPLs starting at once must not see a half-written model: build aside, rename.
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    try:
        os.replace(tmp, dest)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
