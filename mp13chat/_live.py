# SPDX-License-Identifier: MIT
"""A streamed reply shown as markdown while it grows.

``LiveMarkdown`` collects a reply's text deltas and keeps a transient ``rich`` live
area that re-renders the text as markdown (at most ``fps`` times a second, and less
often when a long reply takes a while to render). The area shows only the reply's
last screenful, so it never grows past the terminal, where a live area can no
longer be redrawn and would leave copies behind. ``close`` removes
the area and prints the whole reply once as markdown, so the scrollback holds it
exactly as a non-streamed reply.

Only for consoles on a terminal: elsewhere (pipes, files, tests) replies stream as
plain text. The live area never redirects ``sys.stdout`` (prompt-toolkit's
``patch_stdout`` owns it) and refreshes only when text arrives (no thread).
"""

from __future__ import annotations

import time

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment


class _Tail:
    """The last ``height`` lines of ``text`` rendered as markdown."""

    def __init__(self, text: str, height: int) -> None:
        self.text = text
        self.height = height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(Markdown(self.text), options.update(height=None), pad=False)
        for line in lines[-self.height :]:
            yield from line
            yield Segment.line()


class LiveMarkdown:
    """Markdown re-rendered while a reply streams (see the module docstring)."""

    def __init__(self, console: Console, *, fps: float = 12.0) -> None:
        self.console = console
        self._min_interval = self._interval = 1.0 / fps
        self._parts: list[str] = []
        self._live: Live | None = None
        self._shown = 0.0

    @property
    def active(self) -> bool:
        """Whether a reply is being shown (text arrived and ``close`` was not called)."""
        return self._live is not None

    def _frame(self) -> _Tail:
        # Leave a line for the cursor so the area never fills the whole screen.
        return _Tail("".join(self._parts), max(1, self.console.size.height - 1))

    def append(self, text: str) -> None:
        """Add a text delta and redraw (unless the last redraw was very recent)."""
        if not text:
            return
        self._parts.append(text)
        if self._live is None:
            self._live = Live(
                self._frame(),
                console=self.console,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
            self._shown = time.monotonic()
            return
        now = time.monotonic()
        if now - self._shown >= self._interval:
            self._live.update(self._frame(), refresh=True)
            self._shown = time.monotonic()
            # A long reply takes longer to render: redraw less often so rendering never
            # takes more than about a third of the time (the loop must keep up with tokens).
            self._interval = max(self._min_interval, 3 * (self._shown - now))

    def close(self) -> str:
        """Remove the live area and print the whole reply as markdown; return its text."""
        text = "".join(self._parts)
        self._parts.clear()
        live, self._live = self._live, None
        if live is not None:
            live.stop()
            if text.strip():
                self.console.print(Markdown(text))
        return text
