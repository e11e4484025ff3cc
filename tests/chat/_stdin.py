# SPDX-License-Identifier: MIT
"""A standard input for tests: text to read, and whether it claims to be a terminal."""

from __future__ import annotations

import io


class FakeStdin(io.StringIO):
    def __init__(self, text: str = "", tty: bool = False) -> None:
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty
