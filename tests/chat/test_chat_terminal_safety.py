# SPDX-License-Identifier: MIT
"""Data never drives the terminal: control sequences in replies, tool results, imported
conversations and titles are shown as visible characters, never written raw.

Before, the REPL's rich console passed ESC through: a tool result (a fetched page, a
file) or an imported turn holding ``ESC ] 52 ; c ; ...`` wrote the user's clipboard,
``ESC [ 2 J`` cleared the screen, ``ESC [ 1 A`` could redraw lines above (an approval
prompt). The console the app makes is a ``SafeConsole``; styles (none here:
``color_system=None``) and layout work as before.
"""

from __future__ import annotations

import io
import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall
from mp13chat._oneshot import AnswerView
from mp13chat._safe_console import SafeConsole, terminal_safe
from mp13chat._style import make_theme

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"
CLEAR = "\x1b[2J\x1b[1A"
C1_CSI = "\x9b31m"


def _safe_console() -> tuple[SafeConsole, io.StringIO]:
    out = io.StringIO()
    return SafeConsole(file=out, theme=make_theme(), width=140, color_system=None), out


def test_the_app_makes_a_safe_console(make_chat):
    from mp13chat import ChatApp

    assert isinstance(ChatApp().console, SafeConsole)


def test_control_sequences_in_data_are_shown_not_sent():
    console, out = _safe_console()
    table = Table("title")
    table.add_row(Text(f"evil{CLEAR}"))
    console.print(Text(f"reply {CLIPBOARD} {C1_CSI}"), Panel(Text(CLEAR)), table)
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x9b" not in shown and "\x07" not in shown
    assert "␛]52;c;ZXZpbA==" in shown and "␛[2J" in shown
    assert terminal_safe("tab\tand\nnewline stay") == "tab\tand\nnewline stay"


def test_styles_still_reach_a_colour_terminal():
    out = io.StringIO()
    console = SafeConsole(file=out, force_terminal=True, color_system="standard")
    console.print(Text("red", style="red"), Text(f"data {CLEAR}"))
    shown = out.getvalue()
    assert "\x1b[31mred" in shown  # rich's own styling is untouched
    assert "\x1b[2J" not in shown and "␛[2J" in shown


def test_the_repl_shows_hostile_replies_tool_results_and_imports_harmlessly(make_chat, tmp_path):
    def fetch(url: str) -> str:
        """Fetch a page."""
        return f"page {CLIPBOARD} body {CLEAR}"

    engine = FakeEngine(
        [FakeReply(tool_calls=[ToolCall("fetch", {"url": "x"})]), f"summary {CLEAR} done"]
    )
    console, out = _safe_console()
    h = make_chat(engine, app_kwargs={"console": console, "tools": [fetch]}, stream=True)
    h.run("/tools approval fetch allow", "fetch it")
    dump = tmp_path / "dump.json"
    h.run(f"/export {dump}")
    data = json.loads(dump.read_text(encoding="utf-8"))
    data["conversations"][0]["info"]["title"] = f"title {CLIPBOARD}"
    for conversation in data["conversations"]:
        for node in conversation["nodes"]:
            node.pop("hash", None)  # edited: imported as a version-1 document
    data["version"] = 1
    dump.write_text(json.dumps(data), encoding="utf-8")
    h.run(f"/import {dump} copy", "/list", "/tree", "/history")
    shown = out.getvalue()
    assert "summary" in shown and "page" in shown and "title" in shown
    assert "\x1b" not in shown and "\x07" not in shown
    assert "␛]52;c;ZXZpbA==" in shown


def test_a_one_shot_answer_is_raw_when_piped_and_harmless_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped, terminal = io.StringIO(), Terminal()
    console = Console(file=io.StringIO())
    for out in (piped, terminal):
        view = AnswerView(console, out, stream=True)
        view._write(f"answer {CLEAR}")
    assert piped.getvalue() == f"answer {CLEAR}"  # data, as the model wrote it
    assert terminal.getvalue() == "answer ␛[2J␛[1A"
