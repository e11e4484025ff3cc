# SPDX-License-Identifier: MIT
"""Reading what the REPL printed: the tests' shared parsers of its output."""

from __future__ import annotations


def table_rows(out: str) -> dict[str, list[str]]:
    """The rows of a printed table, keyed by their first cell."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows
