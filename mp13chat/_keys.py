# SPDX-License-Identifier: MIT
"""Key bindings of the prompt.

- Enter sends the input; Alt+Enter (Esc then Enter) inserts a newline, so multi-line
  messages need no mode switch.
- Ctrl+C at the prompt clears the line (prompt-toolkit raises ``KeyboardInterrupt``,
  which the loop treats as "start over"); during a reply it cancels the reply (that
  is a signal handler in the app, not a key binding: the prompt is not active then).
- Ctrl+D on an empty line exits (prompt-toolkit raises ``EOFError``).
"""

from __future__ import annotations

from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent


def make_key_bindings() -> KeyBindings:
    """A fresh set of the REPL's key bindings."""
    kb = KeyBindings()

    @kb.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return kb
