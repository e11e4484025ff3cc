# SPDX-License-Identifier: MIT
"""Showing the fetch of a named real model (``--model smollm2-135m``) while it runs.

``FetchDisplay`` is the ``progress`` callback given to ``models.fetch``: a rich progress
bar whose line names the stage ("download", "convert", ...) and its message, with a
percentage when the stage knows its total. Before the first real work it prints one
clear line (what is fetched, that it happens once, and where it goes); a model that is
already cached only reports "ready", so nothing is printed then. Events arrive on the
fetching thread; rich's ``Progress`` is thread-safe and ``FetchDisplay`` keeps only
what it needs to tell a first fetch from a cached one.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

READY = "ready"


class FetchDisplay:
    """Progress display for one ``models.fetch`` call (use it as a context manager)."""

    def __init__(self, console: Console, name: str) -> None:
        self.name = name
        self.console = console
        self.fetched = False  # a stage other than "ready" ran: this was a first fetch
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> FetchDisplay:
        if self.console.is_terminal:  # elsewhere a bar would only leave blank lines
            self._progress.start()
            self._task = self._progress.add_task(f"{self.name}: starting", total=None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._progress.stop()

    def __call__(self, event: Any) -> None:
        """One ``FetchProgress`` event (``stage``, ``done``, ``total``, ``message``)."""
        stage = str(event.stage)
        if stage != READY and not self.fetched:
            self.fetched = True
            self._progress.console.print(
                Text(
                    f"{self.name} is not in the model cache yet: fetching it once "
                    "(later starts load the cached copy)",
                    style="mp13.info",
                )
            )
        if self._task is None:
            return
        message = f" {event.message}" if event.message else ""
        self._progress.update(
            self._task,
            description=f"{self.name}: {stage}{message}",
            completed=event.done,
            total=event.total,
        )
