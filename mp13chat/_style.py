# SPDX-License-Identifier: MIT
"""Colours: one prompt-toolkit style for the input line and one rich theme for output.

Output code refers to the theme's names (``mp13.reasoning`` ...) rather than colours,
so a wrapper app can restyle the REPL by passing another theme.
"""

from __future__ import annotations

from prompt_toolkit.styles import Style
from rich.theme import Theme

THEME_STYLES: dict[str, str] = {
    "mp13.prompt": "bold cyan",
    "mp13.reply": "",
    "mp13.reasoning": "dim italic",
    "mp13.tool": "cyan",
    "mp13.tool.error": "red",
    "mp13.info": "dim",
    "mp13.ok": "green",
    "mp13.warn": "yellow",
    "mp13.error": "bold red",
    "mp13.banner": "bold magenta",
    "mp13.current": "bold reverse",
    "mp13.logprob.unsure": "yellow",  # a token the model gave under 50%
    "mp13.logprob.low": "bold red",  # under 10%
}


def make_theme() -> Theme:
    """The rich theme of the REPL's output."""
    return Theme(THEME_STYLES)


def make_prompt_style() -> Style:
    """The prompt-toolkit style of the input line and completion menu."""
    return Style.from_dict(
        {
            "prompt": "ansicyan bold",
            "prompt.branch": "ansimagenta",
            "bottom-toolbar": "noreverse ansibrightblack",
        }
    )
