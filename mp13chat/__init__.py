# SPDX-License-Identifier: MIT
"""mp13chat: the terminal REPL for mp13 (prompt-toolkit input, rich output)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mp13chat`` console script."""
    print(
        "mp13chat: the REPL is under construction. Meanwhile run "
        "`python examples/quickstart.py` to chat with a built-in tiny model.",
        file=sys.stderr,
    )
    return 0


__all__ = ["main"]
