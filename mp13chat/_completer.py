# SPDX-License-Identifier: MIT
"""Completion of slash commands, subcommands and their arguments.

The completer reads the REPL's ``CommandRegistry`` at completion time (so commands a
wrapper app adds complete too) and asks a command's ``complete(repl, index, words)`` for
argument candidates (adapter names, tool names, conversation ids, ...). It never raises:
a failing argument completer yields nothing, because a broken completion must not break
typing.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from mp13chat._errors import ChatError
from mp13chat._registry import Command
from mp13chat._repl import Repl


def complete_paths(_repl: Repl, _index: int, words: list[str]) -> list[str]:
    """Argument completer for a file path: the file and folder names completing the word
    being typed (folders end with ``/``)."""
    word = words[-1] if words else ""
    expanded = os.path.expanduser(word)
    folder, _, stem = expanded.rpartition("/")
    base = Path(folder or ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    prefix = word[: len(word) - len(stem)]
    return [
        prefix + e.name + ("/" if e.is_dir() else "")
        for e in entries
        if e.name.startswith(stem) and (stem.startswith(".") or not e.name.startswith("."))
    ]


class CommandCompleter(Completer):
    """prompt-toolkit completer over one REPL's commands."""

    def __init__(self, repl: Repl) -> None:
        self._repl = repl

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        try:
            yield from self._complete(text)
        except (ChatError, ValueError):
            return

    def _complete(self, text: str) -> Iterator[Completion]:
        registry = self._repl.commands
        head, sep, rest = text[1:].partition(" ")
        if not sep:
            for cmd in registry:
                if cmd.name.startswith(head):
                    yield Completion("/" + cmd.name, -len(text), display_meta=cmd.summary)
            return
        cmd = registry.resolve(head)
        words, current = _split(rest)
        while cmd.subcommands:
            if not words:
                for sub in cmd.subcommands:
                    if sub.name.startswith(current):
                        yield Completion(sub.name, -len(current), display_meta=sub.summary)
                return
            cmd = cmd.subcommand(words.pop(0))
        yield from self._arguments(cmd, words, current)

    def _arguments(
        self, cmd: Command[Repl], words: list[str], current: str
    ) -> Iterator[Completion]:
        if cmd.complete is None:
            return
        try:
            # An app's completer may offer numbers (levels, counts): they complete as text.
            candidates = [
                str(value) for value in cmd.complete(self._repl, len(words), [*words, current])
            ]
        except Exception:  # a broken completer must never break typing
            return
        for value in candidates:
            if value.startswith(current):
                yield Completion(value, -len(current))


def _split(rest: str) -> tuple[list[str], str]:
    """Complete words typed so far, and the word being typed (``""`` after a space)."""
    try:
        words = shlex.split(rest)
    except ValueError:
        words = rest.split()
    if rest and not rest[-1].isspace() and words:
        return words[:-1], words[-1]
    return words, ""
