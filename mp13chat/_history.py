# SPDX-License-Identifier: MIT
"""Persistent prompt history: one file next to the config file, or memory only.

prompt-toolkit's ``FileHistory`` appends each entry as it is accepted, so the
history survives a crash; a file that cannot be created falls back to memory (the
REPL must start even on a read-only home).
"""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.history import FileHistory, History, InMemoryHistory

HISTORY_FILENAME = "history"


def make_history(folder: Path | None) -> History:
    """A ``FileHistory`` in ``folder`` (created if needed), or in-memory when ``None``."""
    if folder is None:
        return InMemoryHistory()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / HISTORY_FILENAME
        path.touch(exist_ok=True)
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(path))
