# SPDX-License-Identifier: MIT
"""A wrapper app: mp13chat with two tools and a command of its own.

Run it like the ``mp13chat`` command (same flags)::

    python examples/wrapper_app.py                 # the built-in demo model
    python examples/wrapper_app.py --model tiny    # a random tiny model, starts fastest
    python examples/wrapper_app.py -p "how many words are in 'a b c'?"   # answer once

Inside, ``/tools`` lists ``word_count`` and ``remember`` next to the builtins.
``remember`` is registered with ``risk="medium"``, so the REPL asks before running it
(yes / no / always). ``/notes`` (or ``/notes 3``) shows what ``remember`` wrote; its
``usage="/notes [N]"`` says it takes a number (a command made without ``usage=`` takes
no words after its name). ``/help notes`` shows its docstring.

The built-in demo model was trained with mp13chat's builtin tools only: this app's two
extra tools change its prompt, and its replies come out garbled (e.g. ``hello`` got
"Hello! I am the mp13 dem" and tool-call debris). With it the app shows its machinery
(``/tools``, ``/notes``, the approval question), not answers; give ``--model PATH`` a
real tool-capable model for those.

The app is built with ``mp13chat.ChatApp``: its tools are handed over explicitly
(``register_tool`` only attaches options, here the risk, to a function) and its command
is registered on it. With tools alone, ``mp13chat.main(tools=[word_count, remember])``
does the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mp13chat


def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text to count the words of.
    """
    return len(text.split())


@mp13chat.register_tool(risk="medium")
def remember(note: str) -> str:
    """Write a short note into notes.txt in the current folder.

    Args:
        note: What to remember.
    """
    with open("notes.txt", "a", encoding="utf-8") as notes:
        notes.write(note.strip() + "\n")
    return f"noted: {note.strip()}"


@mp13chat.command("notes", group="wrapper", usage="/notes [N]")
def notes(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
    """Show the last N notes that remember wrote (all of them without N)."""
    (count,) = line.require_words("at most one number, e.g. /notes 3", low=0, high=1) or ["0"]
    if not count.isdigit():
        raise mp13chat.UsageError(f"N is a whole number, got {count!r}")
    path = Path("notes.txt")
    kept = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    shown = kept[-int(count) :] if int(count) else kept
    repl.console.print("\n".join(shown) if shown else "no notes yet")


def build_app() -> mp13chat.ChatApp:
    app = mp13chat.ChatApp(tools=[word_count, remember])
    app.register_command(notes)
    return app


if __name__ == "__main__":
    sys.exit(build_app().main())
