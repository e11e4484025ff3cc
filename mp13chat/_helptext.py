# SPDX-License-Identifier: MIT
"""A command's help text flowed to the terminal's width, and its subcommands listed to fit.

Concept: a help text is a docstring, wrapped by its author at about 88 columns. Shown
with those line breaks, a terminal narrower than that wraps every line again, raggedly
(a full line, then one or two words, then a full line). ``help_text(doc)`` re-fills each
paragraph instead, so rich wraps it once, at the console's width; the docstring's blank
lines still separate paragraphs.

What is kept as written: a list item (a line starting with ``-``, ``*``, ``•`` or
``1.``/``1)``) starts a new line and is re-filled with its continuation lines (indented
up to the item's text) under a hanging indent; an indented line that is not a list
item (an ``Args:`` entry, a usage example, a code line) stays one line of its own with
its indent. Only prose lines at the paragraph's left margin are joined.

``subcommands(cmd)`` lists a group's subcommands as a table where it fits, and as
usage lines each followed by its indented summary where it does not (on a 40-column
terminal the table's summary column was a word wide and its cells cut with "…").
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mp13chat._registry import Command

_ITEM = re.compile(r"(?P<indent>\s*)(?P<marker>[-*•]|\d+[.)])\s+(?P<text>\S.*)")

#: The narrowest the table's summary column may be before the list form is used instead.
_MIN_SUMMARY = 28


@attrs.frozen
class _Block:
    """One unit of help text: prose (re-filled), a list item (re-filled under its
    marker) or a line kept as written."""

    kind: str  # "prose", "item" or "verbatim"
    text: str
    marker: str = ""


def help_text(doc: str) -> Group:
    """``doc`` (a docstring) as rich renderables that wrap at the console's width."""
    parts: list[RenderableType] = []
    for i, paragraph in enumerate(_paragraphs(inspect.cleandoc(doc))):
        if i:
            parts.append(Text(""))
        parts.extend(_render(block) for block in _blocks(paragraph))
    return Group(*parts)


def _paragraphs(doc: str) -> Iterator[list[str]]:
    lines: list[str] = []
    for line in doc.splitlines():
        if line.strip():
            lines.append(line.rstrip())
        elif lines:
            yield lines
            lines = []
    if lines:
        yield lines


def _blocks(lines: Sequence[str]) -> list[_Block]:
    blocks: list[_Block] = []
    # An item's continuation lines are indented past its marker, up to its text's
    # column; a line indented further is an example under it, kept as written.
    item_margin = item_text = -1  # outside a list item
    for line in lines:
        indent = len(line) - len(line.lstrip())
        item = _ITEM.fullmatch(line)
        if item is not None:
            blocks.append(_Block("item", item["text"], item["indent"] + item["marker"]))
            item_margin, item_text = indent, item.start("text")
        elif item_margin < indent <= item_text and blocks[-1].kind == "item":
            blocks[-1] = attrs.evolve(blocks[-1], text=f"{blocks[-1].text} {line.strip()}")
        elif indent:
            blocks.append(_Block("verbatim", line))
        elif blocks and blocks[-1].kind == "prose":
            blocks[-1] = attrs.evolve(blocks[-1], text=f"{blocks[-1].text} {line}")
        else:
            blocks.append(_Block("prose", line))
            item_margin = item_text = -1
    return blocks


def _render(block: _Block) -> RenderableType:
    if block.kind == "item":
        grid = Table.grid(padding=(0, 1, 0, 0))
        grid.add_column(no_wrap=True)
        grid.add_column()
        grid.add_row(block.marker, " ".join(block.text.split()))
        return grid
    if block.kind == "verbatim":
        return Text(block.text)
    return Text(" ".join(block.text.split()))


@attrs.frozen
class Usage:
    """A usage line (``usage: /tools list|mode|scope ...``) that breaks, where it must,
    between words or after a ``|``, never inside a word; continuation lines are indented
    under the command's name.

    Why: rich breaks only at spaces, so ``/adapters list|load|unload|...`` was cut at
    the terminal's last column ("defau" / "lt|pop")."""

    usage: str
    label: str = "usage: "
    indent: int = 0
    style: str = "bold"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        hang = " " * (self.indent + cell_len(self.label))
        lines = [" " * self.indent + self.label]
        fresh = True  # nothing after the label or hanging indent on this line yet
        for i, word in enumerate(self.usage.split()):
            for j, piece in enumerate(re.findall(r"[^|]*\|?", word)[:-1] or [word]):
                gap = " " if i and not j and not fresh else ""
                if not fresh and cell_len(lines[-1] + gap + piece) > width:
                    lines.append(hang)
                    gap = ""
                lines[-1] += gap + piece
                fresh = False
        for line in lines:
            yield Text(line, style=self.style)


@attrs.frozen
class Subcommands:
    """A group's subcommands as ``(name, usage, summary)`` rows, laid out to fit."""

    rows: tuple[tuple[str, str, str], ...]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        names = max((cell_len(name) for name, _, _ in self.rows), default=0)
        usages = max((cell_len(usage) for _, usage, _ in self.rows), default=0)
        # three columns, each padded one cell either side, joined by two rules
        if names + usages + _MIN_SUMMARY + 8 <= options.max_width:
            yield self._table()
            return
        yield Text("subcommands:", style="bold")
        for _, usage, summary in self.rows:
            yield Usage(usage, label="", indent=2)
            yield Padding(Text(summary), (0, 0, 0, 4))

    def _table(self) -> Table:
        out = Table(title=None, show_edge=False, header_style="bold")
        for col in ("subcommand", "usage", "what it does"):
            out.add_column(col)
        for row in self.rows:
            out.add_row(*(Text(cell) for cell in row))
        return out


def subcommands(commands: Sequence[Command[Any]]) -> Subcommands:
    """The subcommand listing of a group command (``Command.subcommands``)."""
    return Subcommands(tuple((c.name, c.usage, c.summary) for c in commands))
