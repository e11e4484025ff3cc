# SPDX-License-Identifier: MIT
"""A wrapper app: mp13chat with two tools of its own.

Run it like the ``mp13chat`` command (same flags)::

    python examples/wrapper_app.py                 # the built-in demo model
    python examples/wrapper_app.py --model tiny    # a random tiny model, starts fastest
    python examples/wrapper_app.py -p "how many words are in 'a b c'?"   # answer once

Inside, ``/tools`` lists ``word_count`` and ``remember`` next to the builtins.
``remember`` is registered with ``risk="medium"``, so the REPL asks before running it
(yes / no / always). The app hands its tools to ``mp13chat.main(tools=[...])``
explicitly; ``register_tool`` only attaches options (here the risk) to a function for
that moment. (To build the app yourself instead: ``app = mp13chat.ChatApp();
app.register_tool(word_count); app.main()``.)
"""

from __future__ import annotations

import sys

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


if __name__ == "__main__":
    sys.exit(mp13chat.main(tools=[word_count, remember]))
