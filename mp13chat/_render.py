# SPDX-License-Identifier: MIT
"""Rendering with rich: replies as markdown, reasoning dimmed, tool calls and results as
panels, tables for lists, one-line errors.

Every function takes the ``Console`` to print on (the app's, which tests point at a
``StringIO``) and data from the lower layers; none of them changes any state. Output
styles are names from the theme in ``_style`` so the look can be changed in one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.markdown import Markdown
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mp13_toolbox import Mp13Error, ToolCall, ToolResult
from mp13chat._helptext import Usage, help_text, subcommands
from mp13chat._registry import Command, CommandRegistry


def error_line(exc: BaseException) -> str:
    """One line for an error: our errors by message, others with their type name."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, Mp13Error):
        return message or type(exc).__name__
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def print_error(console: Console, exc: BaseException) -> None:
    text = Text("error: ", style="mp13.error")
    text.append(error_line(exc))
    text.append("  (/error shows the traceback)", style="mp13.info")
    console.print(text)


def print_start_error(
    console: Console, exc: BaseException | str, *, hint: str | None = None, log: Path | None = None
) -> None:
    """A failure outside the REPL loop (a failed start, a one-shot answer): the error,
    what to try, where the traceback went. No REPL command is named: none can run."""
    text = Text("error: ", style="mp13.error")
    text.append(exc if isinstance(exc, str) else error_line(exc))
    console.print(text)
    if hint:
        print_info(console, hint)
    if log is not None:
        print_info(console, f"the full traceback is in {log}")


def print_info(console: Console, message: str) -> None:
    console.print(Text(message, style="mp13.info"))


def print_ok(console: Console, message: str) -> None:
    console.print(Text(message, style="mp13.ok"))


def print_warning(console: Console, message: str) -> None:
    console.print(Text(message, style="mp13.warn"))


def print_reply(console: Console, text: str, *, markdown: bool = True) -> None:
    """A finished reply: markdown when asked (and non-empty), else plain text."""
    if not text.strip():
        return
    console.print(Markdown(text) if markdown else Text(text, style="mp13.reply"))


def print_reasoning(console: Console, text: str) -> None:
    if text.strip():
        console.print(Text(text.strip(), style="mp13.reasoning"))


def _arguments_text(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, indent=None) if arguments else "{}"


def tool_call_panel(call: ToolCall) -> Panel:
    body = Text(f"{call.name}(", style="bold")
    body.append(_arguments_text(call.arguments))
    body.append(")", style="bold")
    title = "tool call" + (f" {call.id}" if call.id else "")
    return Panel(body, title=title, title_align="left", border_style="mp13.tool", expand=False)


#: Under a failed tool's panel while ``/error`` shows its traceback.
ERROR_HINT = "/error shows the traceback"


def tool_result_panel(result: ToolResult, *, error_hint: bool = False) -> Panel:
    """A tool result as the model read it. ``error_hint``: the REPL keeps this result's
    traceback for ``/error`` (a live failure, not one shown again from history), so the
    panel says so."""
    style = "mp13.tool.error" if result.is_error else "mp13.tool"
    title = f"{result.name} → " + ("error" if result.is_error else "result")
    if result.truncated:
        title += " (truncated)"
    shown = error_hint and result.traceback is not None
    hint = Text(ERROR_HINT, style="mp13.info") if shown else None
    # rich sizes a panel by its body and title, not its subtitle: a short error would
    # cut the hint, so such a panel is made as wide as the hint (borders and gaps: 6).
    body = Text(result.content)
    widest = max((cell_len(line) for line in result.content.splitlines()), default=0)
    narrow = shown and widest < len(ERROR_HINT) + 2
    return Panel(
        body,
        title=title,
        title_align="left",
        subtitle=hint,
        subtitle_align="left",
        border_style=style,
        expand=narrow,
        width=len(ERROR_HINT) + 6 if narrow else None,
    )


def tool_error_text(result: ToolResult, call: ToolCall | None) -> str:
    """What ``/error`` shows for a failed tool: which tool, called with what, and its
    traceback (``result.traceback``, which the model never saw)."""
    arguments = _arguments_text(call.arguments) if call is not None else "(arguments not known)"
    header = f"tool {result.name} failed, called with {arguments}"
    if result.call_id:
        header += f" (call {result.call_id})"
    return f"{header}\n{result.traceback or ''}"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> FitTable:
    """A plain table; cells are converted with ``str`` (``None`` shows as ``-``).

    Where the terminal is too narrow for its columns it prints as records instead
    (``FitTable``)."""
    cells = tuple(tuple(_cell(cell) for cell in row) for row in rows)
    return FitTable(title, tuple(columns), cells)


_UNCLAMPED = 10_000


@attrs.frozen
class FitTable:
    """A table that fits the console: the table itself where every column gets at least
    its longest word, else one record per row (its first cell as a heading, then each
    other column as ``column: value`` under it).

    Why: rich squeezes a table that does not fit until its columns are a word or a few
    letters wide and cuts the rest with "…": at 40 columns ``/tools list`` read
    ``cal… │ adv… │ adv…`` and ``/config``'s meanings ran down the screen a word a line.
    """

    title: str | None
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def as_table(self) -> Table:
        out = Table(title=self.title, title_justify="left", show_edge=False, header_style="bold")
        for col in self.columns:
            out.add_column(col)
        for row in self.rows:
            out.add_row(*row)
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        full = self.as_table()
        # measured unclamped: rich clamps a measurement to the width it is given
        unclamped = options.update_width(_UNCLAMPED)
        if Measurement.get(console, unclamped, full).minimum <= options.max_width:
            yield full
            return
        if self.title:
            yield Text(self.title, style="table.title")
        # A first column without a header (a marker such as the current one's ▶) is
        # shown in the heading together with the next column.
        lead = 2 if len(self.columns) > 1 and not self.columns[0] else 1
        for row in self.rows:
            heading = Text(" ").join(_plain(cell) for cell in row[:lead] if _plain(cell).plain)
            heading.stylize("bold")
            yield heading
            fields = Table.grid(padding=(0, 1, 0, 0))
            fields.add_column(no_wrap=True)
            fields.add_column(overflow="fold")
            for name, cell in zip(self.columns[lead:], row[lead:], strict=False):
                fields.add_row(Text(f"{name}:", style="bold") if name else Text(""), cell)
            yield Padding(fields, (0, 0, 0, 2))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.as_table())


def _plain(cell: Any) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


def _cell(cell: Any) -> Any:
    # Plain values become Text so that brackets in data are never read as rich markup.
    if cell is None:
        return Text("-")
    if isinstance(cell, (Text, Table, Panel)):
        return cell
    return Text(str(cell))


def highlight_snippet(snippet: str) -> Text:
    """A search snippet with its ``[match]`` marks shown bold instead of as brackets."""
    out = Text()
    rest = snippet
    while "[" in rest and "]" in rest[rest.index("[") :]:
        before, _, tail = rest.partition("[")
        match, _, rest = tail.partition("]")
        out.append(before)
        out.append(match, style="bold reverse")
    out.append(rest)
    return out


def key_values(title: str | None, items: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of names and values (no header row)."""
    out = Table(title=title, title_justify="left", show_header=False, show_edge=False)
    out.add_column(style="bold")
    out.add_column(overflow="fold")  # a long path folds onto the next line, never cut
    for name, value in items:
        out.add_row(_cell(name), _cell(value))
    return out


def help_overview(registry: CommandRegistry[Any]) -> Table:
    """All commands by group with their one-line summaries."""
    out = Table(show_header=False, show_edge=False, box=None, pad_edge=False)
    out.add_column(style="bold cyan", no_wrap=True)
    out.add_column()
    for group, commands in registry.groups().items():
        out.add_row(Text(group, style="mp13.banner"), "")
        for cmd in commands:
            out.add_row("  /" + cmd.name, cmd.summary)
    return out


def command_help(cmd: Command[Any]) -> Group:
    """Usage, full help text (flowed to the console's width) and subcommands of one
    command."""
    parts: list[Any] = [Usage(cmd.usage)]
    if cmd.aliases:
        parts.append(Text("aliases: " + ", ".join("/" + a for a in cmd.aliases), style="mp13.info"))
    if cmd.doc:
        parts.append(help_text(cmd.doc))
    if cmd.subcommands:
        parts.append(subcommands(cmd.subcommands))
    return Group(*parts)
