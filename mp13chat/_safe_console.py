# SPDX-License-Identifier: MIT
"""A rich ``Console`` that never sends the terminal control characters found in data.

Concept: almost everything the REPL shows comes from somewhere it does not control:
model output, tool results (a web page, a file, a command's output), imported or
saved conversations and their titles. Rich keeps markup in data as text, and drops
BEL, BS, VT, FF and CR, but passes every other control character through, ESC
included: a tool result or an imported turn holding ``ESC ] 52 ; c ; ...`` wrote the
clipboard, ``ESC [ 2 J`` cleared the screen, ``ESC [ 1 A`` could redraw an approval
prompt. ``SafeConsole.render`` replaces, in every text segment rich renders, each C0
and C1 control character except newline and tab, and DEL, with a visible stand-in
(its Unicode control picture, ``␛`` for ESC; U+FFFD for C1), so it shows as a
character and does nothing.

Invariants: rich's own styling and cursor control never pass through here as text
(styles are written around segments when they are output, cursor moves are control
segments, kept as they are), so colours, live areas and tables work unchanged; text
without control characters is passed through as the same segments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control picture: ESC -> "␛"
    return "\u2421" if code == 0x7F else "\ufffd"


def terminal_safe(text: str) -> str:
    """``text`` with its terminal control characters made visible and harmless."""
    return _UNSAFE.sub(_stand_in, text) if _UNSAFE.search(text) else text


class SafeConsole(Console):
    """A ``Console`` whose rendered text can hold no terminal control sequence."""

    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not _UNSAFE.search(segment.text):
                yield segment
            else:
                yield Segment(terminal_safe(segment.text), segment.style, segment.control)
