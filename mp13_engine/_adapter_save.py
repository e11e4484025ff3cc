# SPDX-License-Identifier: Apache-2.0
"""Saving an adapter folder whole: written beside it, swapped in, and what a killed save left.

``write_adapter_dir`` writes the adapter's PEFT files and mp13's metadata into a
hidden staging folder beside the target (``.NAME.mp13-save.<pid>-<random>``) and
swaps it in with two renames (the old folder aside as ``.NAME.mp13-old...``, the
new one into its place); the old folder's other entries then join the new one.

Invariants: the folder holds one adapter's files (``ADAPTER_FILES``), never a mix of
two saves, and keeps its other entries (a job's ``checkpoints``, the user's files).
Each save stages under its own name, so saves into one folder at once, from threads
or processes, never write into each other's staging folder, and the last to swap in
is the folder. A save killed between its two renames leaves no folder and the old
one beside it: the next save (``_recover``) or load (``finish_cut_short_save``) puts
it back. A killed save's staging folder is swept by a later save once its process is
gone and it has been untouched for an hour. Every failure to write is an
``AdapterError`` that names the folder.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from mp13_engine._adapter_files import (
    ADAPTER_FILES,
    METADATA_FILE,
    base_model_name,
    read_metadata,
    recorded_base,
)
from mp13_engine._compat import peft_base_model
from mp13_engine._errors import AdapterError


def write_adapter_dir(
    model: Any,
    name: str,
    path: Path,
    metadata: dict[str, Any] | None = None,
    *,
    carry_from: Path | None = None,
) -> None:
    """Write adapter ``name`` of PeftModel ``model`` to ``path`` (PEFT files + mp13 metadata).

    Without ``metadata``, what mp13 recorded in ``carry_from`` (the folder the adapter was
    loaded from or last saved to: training's data, config and loss) is kept; a folder's
    metadata never passes to another adapter saved over it. A folder that cannot be made
    or written is an ``AdapterError``.

    The whole adapter is written into a folder beside ``path`` and swapped in (see
    ``_swap_in``), so a process killed mid-save leaves the old adapter or the new one at
    ``path``, never a mix of their files; what else ``path`` holds (a job's
    ``checkpoints``, files of the user's) stays in it.
    """
    staging = _sibling(path, _STAGING)  # this save's own: another save never writes there
    try:
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a folder", str(path))
        _recover(path)
        _sweep_staging(path)
        meta = {**read_metadata(carry_from), **_describe_base(model, name)}
        meta.update(metadata or {})
        produced = _write_files(model, name, path, staging)
        (produced / METADATA_FILE).write_text(
            json.dumps(meta, indent=2, sort_keys=True, default=str)
        )
        _swap_in(produced, path)
    except OSError as exc:
        raise AdapterError(
            f"Saving adapter {name!r} to {str(path)!r} failed: {exc}. Give a folder that can "
            "be written (new, or one to write the adapter's files into)."
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# Hidden siblings of an adapter folder during a save (``.NAME.mp13-save.<pid>-<random>``): the
# new adapter being written, and the old folder between the swap and the move of its other
# entries into the new one. Unique per save, so two processes saving one folder at once never
# write into each other's staging folder; the next save or load into the folder finds what a
# killed process left by the prefix (``_recover``; older versions used the bare prefix). Hidden,
# so the REPL's discovery of adapter folders skips them.
_STAGING = "mp13-save"
_OLD = "mp13-old"
# A killed save's staging folder is deleted by a later save once untouched this long.
_STALE_STAGING_S = 3600.0
# Rounds of the two-rename swap a save tries while other saves of the folder swap theirs in.
_SWAP_ROUNDS = 8


def _sibling(path: Path, what: str) -> Path:
    return path.with_name(f".{path.name}.{what}.{os.getpid()}-{uuid.uuid4().hex[:12]}")


def _siblings(path: Path, what: str) -> list[Path]:
    """The ``what`` siblings of ``path`` that saves left or are using, the newest first."""
    prefix = f".{path.name}.{what}"
    try:
        found = [
            p for p in path.parent.iterdir() if p.name == prefix or p.name.startswith(prefix + ".")
        ]
    except FileNotFoundError:
        return []

    def age(p: Path) -> int:
        try:
            return -p.stat().st_ctime_ns  # a rename sets the ctime: when it was moved aside
        except OSError:
            return 0

    return sorted(found, key=age)


def _write_files(model: Any, name: str, path: Path, staging: Path) -> Path:
    """Save the adapter's PEFT files under ``staging``; the folder that holds them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    config = model.peft_config[name]
    recorded = config.base_model_name_or_path
    base = peft_base_model(model)
    # PEFT's save reads config.json where the config names the base model (to see whether
    # the vocabulary was resized): pointed at the folder the model was loaded from, it never
    # asks the hub about an id, nor warns about a GGUF file's path.
    config.base_model_name_or_path = base.name_or_path or recorded
    try:
        model.save_pretrained(str(staging), selected_adapters=[name])
    except (ValueError, RuntimeError) as exc:
        raise AdapterError(
            f"Saving adapter {name!r} to {str(path)!r} failed: {exc}. Check the path."
        ) from exc
    finally:
        config.base_model_name_or_path = recorded
    # PEFT writes a non-"default" adapter into a subfolder named after it.
    produced = staging / name if (staging / name).is_dir() else staging
    _record_base(produced / "adapter_config.json", recorded_base(recorded) or base_model_name(base))
    return produced


def _record_base(file: Path, base: str | None) -> None:
    """Write ``base`` as the base model in the adapter config ``file`` PEFT just wrote."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        problem = f"PEFT wrote an adapter config that cannot be read ({exc})"
        raise OSError(errno.EIO, problem, str(file)) from exc
    if isinstance(data, dict) and data.get("base_model_name_or_path") != base:
        data["base_model_name_or_path"] = base
        file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _swap_in(new: Path, path: Path) -> None:
    """Make the complete adapter folder ``new`` the folder ``path``.

    A folder cannot be renamed over a non-empty one (POSIX) or over any folder (Windows),
    so an existing ``path`` is renamed aside first and ``new`` renamed into its place: two
    renames, between which a killed process leaves no ``path`` and both folders beside it
    (``_recover`` puts the old one back). Then the old folder's other entries move into the
    new one and the old adapter is deleted. When the folder cannot be renamed (Windows: a
    file in it is open), the files are replaced one at a time, as before.

    Another process saving into the same folder at once can take ``path`` between two of
    these renames; the swap then goes again, so the last save to swap in is the folder (each
    whole) and the other entries stay in it.
    """
    for _ in range(_SWAP_ROUNDS):
        if not path.exists():
            try:
                new.rename(path)
                return
            except OSError:
                if path.exists():  # another save's folder took the place first: swap again
                    continue
                raise
        if path.is_symlink():  # the link is the user's: write into the folder it points to
            _replace_files(new, path)
            return
        old = _sibling(path, _OLD)
        try:
            path.rename(old)
        except FileNotFoundError:  # another save moved it aside a moment ago: swap again
            continue
        except OSError:  # Windows: a file in it is open; a mount point
            _replace_files(new, path)
            return
        try:
            new.rename(path)
        except OSError:
            if not path.exists():
                raise
            # Another save's folder took the place between the two renames: the entries
            # moved aside join it, and this save swaps in over it.
            _move_kept(old, path)
            continue
        _move_kept(old, path)
        return
    raise OSError(
        errno.EBUSY,
        f"other saves kept swapping their adapter into it ({_SWAP_ROUNDS} tries); save again",
        str(path),
    )


def _replace_files(new: Path, path: Path) -> None:
    """The fallback: each file of ``new`` replaces its namesake in ``path``; stale adapter
    files it does not have are removed."""
    for stale in ADAPTER_FILES - {item.name for item in new.iterdir()}:
        (path / stale).unlink(missing_ok=True)
    for item in new.iterdir():
        if item.is_file():
            os.replace(item, path / item.name)


def _move_kept(old: Path, path: Path) -> None:
    """Move ``old``'s entries that are not the adapter's (nor in ``path``) into ``path``,
    then delete ``old``."""
    try:
        items = list(old.iterdir())
    except FileNotFoundError:  # a concurrent recovery put it back (or settled it) first
        return
    for item in items:
        if item.name not in ADAPTER_FILES and not (path / item.name).exists():
            try:
                item.rename(path / item.name)
            except FileNotFoundError:  # a concurrent recovery of the same folder moved it
                continue
    shutil.rmtree(old, ignore_errors=True)  # what is left is the old adapter's files


def _recover(path: Path) -> None:
    """Settle what saves into ``path`` killed mid-way left beside it: the newest old folder
    goes back when no new one took its place; the other entries of every old one join the
    folder, and the old ones go."""
    for old in _siblings(path, _OLD):
        try:
            if path.exists():
                _move_kept(old, path)
            else:
                old.rename(path)
        except FileNotFoundError:  # a save running now settled it (or swapped it) first
            continue


def _sweep_staging(path: Path) -> None:
    """Delete the staging folders of saves into ``path`` that were killed (``kill -9``: no
    ``finally`` ran): those of a process that no longer runs here, untouched for an hour
    (the folder may be shared by another machine, whose process ids mean nothing here)."""
    for staging in _siblings(path, _STAGING):
        pid = staging.name.rsplit(".", 1)[-1].split("-", 1)[0]
        try:
            stale = time.time() - staging.stat().st_mtime > _STALE_STAGING_S
        except OSError:
            continue
        if stale and not (pid.isdigit() and _runs(int(pid))):
            shutil.rmtree(staging, ignore_errors=True)


def _runs(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (assumed so on Windows, where
    ``os.kill(pid, 0)`` would end it)."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it runs, as another user (PermissionError); or cannot be asked here
        return True
    return True


def finish_cut_short_save(path: Path) -> bool:
    """Put back the folder a save into ``path`` was killed in the middle of swapping (its
    old folder beside it, ``.NAME.mp13-old...``, and no ``path``); True when it did.

    ``AdapterError`` saying what is where when the folder cannot be put back."""
    if path.exists() or not _siblings(path, _OLD):
        return False
    try:
        _recover(path)
    except OSError as exc:
        old = _siblings(path, _OLD)
        raise AdapterError(
            f"A save into {str(path)!r} was cut short while swapping the new adapter in, and "
            f"the adapter it replaced could not be put back ({exc}): it is in "
            f"{str(old[0]) if old else 'a hidden folder beside it'!r}. Rename that folder to "
            f"{path.name!r} and load it again, or save the adapter there again."
        ) from exc
    return path.exists()


def _describe_base(model: Any, name: str) -> dict[str, Any]:
    base = peft_base_model(model)
    return {
        "name": name,
        "base_model": base_model_name(base),
        "model_type": base.config.model_type or None,
        "architectures": list(base.config.architectures or []),
    }
