# SPDX-License-Identifier: MIT
"""Word wrapping for text that arrives a few characters at a time.

Concept: a reply streamed as plain text (markdown off, or not on a terminal) and
streamed reasoning are printed delta by delta as they arrive, so rich cannot wrap them:
the terminal did, at its last column, mid-word ("divi" / "sion"), and a piped
transcript held lines as long as the reply's paragraphs. ``StreamWrap`` breaks the
stream between words at the console's width instead.

Invariants: the text's characters all come out, in order, except that a line break
takes the place of the spaces where a line is full (no line ends in a space); a word
is held back only until the next space or newline, spaces until the next word
(``flush`` gives the held word when the stream or the line ends); a run without
spaces as wide as a line (a URL, CJK text) comes out a line at a time, so nothing
waits long to be shown.
"""

from __future__ import annotations

from rich.cells import cell_len


class StreamWrap:
    """Turns text deltas into what to print now, broken between words at ``width``."""

    def __init__(self) -> None:
        self.column = 0  # cells on the current line
        self.space = ""  # the spaces after the last word printed, not printed yet
        self.word = ""  # the word being read, not printed yet

    def feed(self, text: str, width: int) -> str:
        """The part of ``text`` (with what was held) that can be printed now."""
        width = max(width, 1)
        out: list[str] = []
        for char in text:
            if char == "\n":
                out.append(self._place(width) + "\n")
                self.column, self.space = 0, ""
            elif char.isspace():
                out.append(self._place(width))
                self.space += char
            else:
                if cell_len(self.word + char) > width:  # the word fills a line: show it now
                    out.append(self._place(width))
                self.word += char
        return "".join(out)

    def flush(self, width: int) -> str:
        """What is held back; the next text starts a new line (the caller ends this one)."""
        out = self._place(max(width, 1))
        self.space, self.column = "", 0
        return out

    def _place(self, width: int) -> str:
        """The held spaces and word, or a line break instead of the spaces when the word
        does not fit on this line."""
        word, self.word = self.word, ""
        if not word:
            return ""
        cells = cell_len(word)
        space, self.space = self.space, ""
        if self.column + cell_len(space) + cells > width:
            # a break instead of the spaces; at a line's start, the indent that no longer fits
            space, self.column = ("\n" if self.column else ""), 0
        else:
            self.column += cell_len(space)
        self.column += cells
        if self.column > width:  # the console got narrower mid-stream: the terminal folds it
            self.column %= width
        return space + word
