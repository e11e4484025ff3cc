# SPDX-License-Identifier: Apache-2.0
"""mp13's on-disk model cache: where it lives, how one entry is written safely, progress.

Concept
    Two things are converted once and then reused: GGUF files (dequantized into
    a Hugging Face checkpoint, see ``_gguf``) and named models (fetched from the
    package registry, see ``mp13_engine.models``). Both write a directory
    *entry* under a cache root and report their progress as ``FetchProgress``
    values to an optional callback.

    Locations (documented in the README)::

        MP13_CACHE         root of mp13's cache (default $XDG_CACHE_HOME/mp13, else ~/.cache/mp13)
        <root>/gguf        converted GGUF files
        MP13_MODELS_DIR    named models (default <root>/models)

Invariants
    * An entry is complete exactly when its final directory exists: it is built
      in a temporary sibling directory and renamed into place in one step
      (``publish``), so a reader never sees half an entry, even after a crash.
    * Writers of the same entry take turns through an exclusive lock file
      (``entry_lock``: ``fcntl.flock`` / ``msvcrt.locking``), which works across
      processes and across threads of one process; the second writer finds the
      entry complete and does nothing.
    * A cache that cannot be written raises ``ModelLoadError`` saying where
      and how to move it. Torch-free; no module-level mutable state (paths are
      read from the environment on every call).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from mp13_engine._errors import ConfigError, ModelLoadError


@attrs.frozen
class FetchProgress:
    """One progress report of a fetch or conversion.

    ``stage`` is one of ``"download"``, ``"extract"``, ``"convert"``, ``"ready"``, and
    ``"load"`` (``Engine.load`` reading the weights into memory: tensors);
    ``done`` of ``total`` units (bytes for downloads, steps otherwise; ``total``
    is None when unknown); ``message`` is a line a person can read.
    """

    stage: str
    done: int
    total: int | None
    message: str


Progress = Callable[[FetchProgress], None]


def check_progress(progress: object, where: str) -> None:
    """``ConfigError`` unless ``progress`` is None or callable.

    Checked when the call starts: a wrong value used to surface only when a slow step
    first reported (a GGUF's first conversion) as ``TypeError: 'bool' object is not
    callable``, and not at all when the model was cached.
    """
    if progress is not None and not callable(progress):
        raise ConfigError(
            f"{where}(progress={progress!r}) is not allowed; give a function that takes a "
            "FetchProgress (progress=print works), or leave it out"
        )


def report(progress: Progress | None, stage: str, done: int, total: int | None, msg: str) -> None:
    """Send one report to ``progress`` (if any)."""
    if progress is not None:
        progress(FetchProgress(stage=stage, done=done, total=total, message=msg))


def cache_root() -> Path:
    """``$MP13_CACHE``, else ``$XDG_CACHE_HOME/mp13``, else ``~/.cache/mp13``."""
    explicit = os.environ.get("MP13_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mp13"


def gguf_cache_dir() -> Path:
    """Where converted GGUF files live: ``<cache root>/gguf``."""
    return cache_root() / "gguf"


def models_cache_dir() -> Path:
    """Where named models live: ``$MP13_MODELS_DIR``, else ``<cache root>/models``."""
    explicit = os.environ.get("MP13_MODELS_DIR")
    return Path(explicit).expanduser() if explicit else cache_root() / "models"


def _unwritable(root: Path, exc: OSError) -> ModelLoadError:
    return ModelLoadError(
        f"cannot write mp13's model cache in {str(root)!r}: {exc}; make it writable, free "
        "some disk space, or point MP13_CACHE (MP13_MODELS_DIR for named models) at another "
        "folder"
    )


@contextlib.contextmanager
def entry_lock(root: Path, key: str) -> Iterator[None]:
    """Hold the exclusive lock of entry ``key`` under ``root`` (blocks until it is free)."""
    locks = root / ".locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
        handle = open(locks / f"{key}.lock", "a+b")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise _unwritable(root, exc) from exc
    with handle:
        _flock(handle, take=True)
        try:
            yield
        finally:
            _flock(handle, take=False)


def _flock(handle: BinaryIO, take: bool) -> None:
    """Take (blocking until it is free) or release the exclusive lock on ``handle``."""
    if sys.platform == "win32":
        import msvcrt

        handle.seek(0)
        while take:
            try:
                msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                return
            except OSError:  # LK_LOCK gives up after ~10 s; keep waiting
                continue
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX if take else fcntl.LOCK_UN)


@contextlib.contextmanager
def staging_dir(root: Path, key: str) -> Iterator[Path]:
    """A fresh temporary directory next to the entries (same filesystem); removed on exit."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    except OSError as exc:
        raise _unwritable(root, exc) from exc
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def publish(built: Path, final: Path) -> None:
    """Move the finished directory ``built`` to ``final`` in one rename.

    A stale ``final`` (left by an older format) is moved aside and removed first;
    callers hold the entry's lock, so nobody else is writing it.
    """
    try:
        if final.exists():
            doomed = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.replace(final, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        os.replace(built, final)
    except OSError as exc:
        raise _unwritable(final.parent, exc) from exc
