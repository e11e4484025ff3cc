# SPDX-License-Identifier: MIT
"""Which model the REPL loads: a path, a named real model, the built-in demo, or a tiny one.

``config.model`` (or ``--model``) is, in this order:

1. an existing local folder — loaded as it is (a folder named like a built-in wins);
2. ``demo`` (also when unset) — ``mp13_engine.testing.demo_model_path()``, a tiny model
   trained to answer a handful of prompts and call a tool, shipped with mp13 — or
   ``tiny`` — a random tiny chatml model (starts fastest; prints gibberish; used by the
   end-to-end test). Built models are cached in mp13's cache folder (``$MP13_CACHE``,
   default ``~/.cache/mp13``);
3. a *named real model* of ``mp13_engine.models`` (``models.names()``, e.g.
   ``smollm2-135m``) — fetched once into that module's cache on first use
   (``models.fetch``, with progress events), later starts load the cached copy;
4. anything else — a hub id for ``Engine.load`` (from the local Hugging Face cache,
   or downloaded with ``--download``).

The named-model catalog is passed in as an object with ``names()`` and
``fetch(name, *, cache_dir=None, progress=None)`` — the ``mp13_engine.models`` module
itself, or a test double — so resolving never needs the network in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from mp13chat._config import DEMO_MODEL, TINY_MODEL


class ModelCatalog(Protocol):
    """What the REPL needs of ``mp13_engine.models``."""

    def names(self) -> list[str]: ...

    def fetch(
        self, name: str, *, cache_dir: Any = None, progress: Callable[[Any], None] | None = None
    ) -> Path: ...


@attrs.frozen
class ModelChoice:
    """A resolved model: what to load, how to name it, and what the user must know."""

    path: str
    label: str
    note: str | None = None  # shown in the banner (e.g. "random weights")
    demo: bool = False  # the built-in demo model (trained to show a tool round)


def engine_catalog() -> ModelCatalog:
    """``mp13_engine.models`` (shipped in the same distribution as mp13chat)."""
    from mp13_engine import models

    catalog: ModelCatalog = models  # the module satisfies the protocol
    return catalog


def _exists(model: str | None) -> bool:
    return bool(model) and Path(str(model)).expanduser().exists()


def is_builtin(model: str | None) -> bool:
    """Whether ``model`` names a built-in model (and no local folder of that name exists)."""
    return model in (None, DEMO_MODEL, TINY_MODEL) and not _exists(model)


def is_named(model: str | None, catalog: ModelCatalog | None) -> bool:
    """Whether ``model`` is a catalog name (and no local folder of that name exists)."""
    return catalog is not None and model in catalog.names() and not _exists(model)


def resolve_model(
    model: str | None,
    *,
    catalog: ModelCatalog | None = None,
    progress: Callable[[Any], None] | None = None,
) -> ModelChoice:
    """Build, fetch (once, cached) or locate the model named by ``model``; may take a
    while. ``progress`` receives ``models.FetchProgress`` events while a named model
    is fetched."""
    if is_named(model, catalog):
        assert model is not None and catalog is not None
        path = catalog.fetch(model, progress=progress)
        return ModelChoice(path=str(path), label=model)
    if not is_builtin(model):
        assert model is not None
        return ModelChoice(path=model, label=model)
    from mp13_engine import testing  # imports torch: only when a built-in model is used

    if model != TINY_MODEL:
        prompts = [p for p, _ in testing.DEMO_PROMPTS][:3]
        tries = ", ".join(repr(p) for p in [*prompts, "what is 17*23?"])
        return ModelChoice(
            path=str(testing.demo_model_path()),
            label="built-in demo model",
            demo=True,
            note=f"a tiny model trained on a few prompts; try {tries}",
        )
    note = "random weights: replies are gibberish; use --model PATH for a real model"
    path = testing.tiny_model_path("chatml", seed=0)
    return ModelChoice(path=str(path), label="tiny random chatml model", note=note)
