# SPDX-License-Identifier: MIT
"""The REPL's adapters folder: where ``/train`` saves, and what is loaded again at start.

The folder is ``engine.adapters_dir`` of the config file when set, else ``adapters``
next to the config file (``~/.config/mp13/adapters``; a REPL without a config file has
none). The REPL passes it to the engine as ``EngineConfig.adapters_dir``, so
``/adapters load NAME`` finds ``FOLDER/NAME`` by its short name.

- ``/train start NAME ...`` saves the adapter to ``FOLDER/NAME`` (unless the command
  gives ``output_dir=``).
- At start (``discover``) every adapter folder in it (one holding PEFT's
  ``adapter_config.json``; hidden ones aside) that was made for the loaded model is loaded under its
  folder's name, so adapters trained in the REPL are there again on the next start.
  "Made for" compares the base model PEFT recorded (``base_model_name_or_path``)
  with the loaded one; an adapter that records none is tried, and the engine refuses
  one whose shapes do not fit. Adapters of other models stay on disk, untouched.

Discovery *is* the persistence: nothing is written into the config file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from mp13_toolbox import Mp13Error

FOLDER_NAME = "adapters"
PEFT_CONFIG = "adapter_config.json"


def adapters_dir(engine_fields: dict[str, Any], config_dir: Path | None) -> Path | None:
    """The adapters folder for a config's ``engine`` fields and the config file's folder."""
    value = engine_fields.get("adapters_dir")
    if value:
        return Path(str(value)).expanduser()
    return config_dir / FOLDER_NAME if config_dir is not None else None


def is_adapter(folder: Path) -> bool:
    return (folder / PEFT_CONFIG).is_file()


def recorded_base(folder: Path) -> str | None:
    """The base model PEFT recorded for the adapter in ``folder`` (None if unreadable)."""
    try:
        data = json.loads((folder / PEFT_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    return str(value) if value else None


def same_model(recorded: str, model: str) -> bool:
    """Whether a recorded base model names ``model`` (the same folder, or the same id)."""
    if recorded == model:
        return True
    a, b = Path(recorded).expanduser(), Path(model).expanduser()
    return a.exists() and b.exists() and os.path.realpath(a) == os.path.realpath(b)


@attrs.frozen
class Discovery:
    """What ``discover`` did: the adapters it loaded, and those that failed to load."""

    loaded: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()  # (name, one-line reason)


def discover(manager: Any, folder: Path, model: str) -> Discovery:
    """Load every adapter in ``folder`` made for ``model`` that ``manager`` (an engine's
    ``adapters``) does not hold yet. Blocking: call it from a worker thread."""
    loaded: list[str] = []
    failed: list[tuple[str, str]] = []
    if not folder.is_dir():
        return Discovery()
    for sub in sorted(p for p in folder.iterdir() if _shown(p) and is_adapter(p)):
        base = recorded_base(sub)
        if sub.name in manager or (base is not None and not same_model(base, model)):
            continue
        try:
            manager.load(sub, sub.name)
        except Mp13Error as exc:
            failed.append((sub.name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            continue
        loaded.append(sub.name)
    return Discovery(tuple(loaded), tuple(failed))


def _shown(path: Path) -> bool:
    """A folder of the user's: hidden ones (``.NAME.mp13-old``, left by a save that was
    cut short, or any ``.NAME``) are not adapters to load under their folder's name."""
    return path.is_dir() and not path.name.startswith(".")


def resolve(word: str, folder: Path | None) -> str:
    """What ``/adapters load WORD`` loads: the path WORD, else ``FOLDER/WORD``."""
    path = Path(word).expanduser()
    if is_adapter(path) or folder is None or path.is_absolute():
        return word
    under = folder / word
    return str(under) if is_adapter(under) else word
