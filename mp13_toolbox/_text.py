# SPDX-License-Identifier: MIT
"""Wording shared by every message that states a count (toolbox results, REPL output).

It lives in the toolbox because that is the package everything else may import: the
REPL's "1 token" and the toolbox's "1 call this turn" come from the same function.
"""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and ``noun`` in the number it takes: ``1 call``, ``2 calls``, ``0 calls``.

    ``nouns`` is the plural where adding an ``s`` is wrong (``plural(n, "child",
    "children")``).
    """
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
