# SPDX-License-Identifier: MIT
"""mp13_context: conversations as trees you can fork, retry, save, search and replay."""

__all__: list[str] = []
