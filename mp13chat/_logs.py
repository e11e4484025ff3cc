# SPDX-License-Identifier: MIT
"""Library warnings go to a log file, not over the chat.

bitsandbytes (missing CPU kernels), transformers and PEFT report through Python's
``warnings`` and ``logging``; printed on the terminal the REPL owns, they land in the
middle of replies and prompts. ``library_log(path)`` routes them, for the duration of
a ``with`` block, into ``LibraryLog``: a handler that appends them to ``path``
(``mp13chat.log`` next to the config file; rotated at 1 MB) and keeps this run's
records for ``/warnings``. The REPL mentions the log once, in one dim line, the first
time a warning arrives (its own INFO notes, ``LibraryLog.note``, are not mentioned).

This changes process-wide logging, so only the console-script path (``ChatApp.main``,
which owns the process) uses it, and everything is restored on exit: the root logger's
handlers and level, ``logging.captureWarnings``, and transformers' own handler
(``LibraryLog.route_transformers``, called once the engine has imported transformers).
"""

from __future__ import annotations

import logging
import logging.handlers
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_FILENAME = "mp13chat.log"
MAX_BYTES = 1_000_000
KEEP = 200  # records kept in memory for /warnings


class LibraryLog(logging.Handler):
    """Writes records to its file and keeps the last ``KEEP`` of this run."""

    def __init__(self, path: Path) -> None:
        super().__init__(level=logging.WARNING)
        self.path = path
        self.records: list[logging.LogRecord] = []
        self.total = 0
        self.noticed = False  # the REPL has told the user about this log
        self._lock_records = threading.Lock()
        self._routed_transformers = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = logging.handlers.RotatingFileHandler(
            path, maxBytes=MAX_BYTES, backupCount=1, encoding="utf-8", delay=True
        )
        self._file.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_records:
            self.total += 1
            self.records.append(record)
            del self.records[:-KEEP]
        self._file.emit(record)

    def note(self, text: str) -> None:
        """Keep a diagnostic of mp13chat's own (e.g. the prefix warm-up failed) in
        ``/warnings`` and the file. It is INFO, not a warning: the REPL's one-line
        mention of this log is for library warnings, and this needs no action."""
        self.emit(logging.LogRecord("mp13chat", logging.INFO, "", 0, text, None, None))

    def write_text(self, text: str) -> None:
        """Append ``text`` (e.g. a traceback) to the log file as one ERROR record."""
        record = logging.LogRecord("mp13chat", logging.ERROR, "", 0, text, None, None)
        self._file.emit(record)

    def route_transformers(self) -> None:
        """Send transformers' log records here instead of its own stderr handler, and turn
        off its progress bars (they would fight with ours). Call it once transformers is
        imported (loading the engine does that); undone when the block ends."""
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
        self._routed_transformers = True

    def _restore_transformers(self) -> None:
        if not self._routed_transformers:
            return
        from transformers.utils import logging as hf_logging

        hf_logging.disable_propagation()
        hf_logging.enable_default_handler()
        hf_logging.enable_progress_bar()
        self._routed_transformers = False

    def close(self) -> None:
        self._file.close()
        super().close()


@contextmanager
def library_log(path: Path) -> Iterator[LibraryLog]:
    """Route warnings and WARNING+ log records into a ``LibraryLog`` for the block."""
    handler = LibraryLog(path)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    # Our handler replaces whatever prints to the terminal (e.g. a StreamHandler).
    for old in saved_handlers:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    try:
        yield handler
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        for old in saved_handlers:
            root.addHandler(old)
        root.setLevel(saved_level)
        handler._restore_transformers()
        handler.close()


def first_line(record: logging.LogRecord, width: int = 80) -> str:
    """The start of a record's message, for a one-line mention."""
    text = record.getMessage().strip()
    line = text.splitlines()[0] if text else record.name
    return line if len(line) <= width else line[: width - 1] + "…"
