# SPDX-License-Identifier: MIT
"""Streamed replies as live markdown: only on a terminal, never taller than the screen,
and the scrollback gets the whole reply once."""

from __future__ import annotations

import io
import time
import types

from rich.console import Console

from mp13_context import Event, EventKind
from mp13chat import ChatConfig
from mp13chat._live import LiveMarkdown, _Tail
from mp13chat._logprobs import LogprobsState
from mp13chat._reply import ReplyView

REPLY = "# Title\n\nSome **bold** words.\n\n" + "".join(f"- item {i}\n" for i in range(30))


def _terminal(height: int = 8) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=40, height=height, color_system=None)
    return console, out


def _final(out: io.StringIO) -> str:
    """What stays on screen: the text after the live area's last erase."""
    text = out.getvalue()
    return text[text.rfind("\x1b[2K") + len("\x1b[2K") :]


def test_the_live_area_shows_only_the_last_screenful():
    console, _ = _terminal(height=8)
    lines = console.render_lines(_Tail(REPLY, 7), console.options)
    assert len(lines) == 7
    assert "item 29" in "".join(seg.text for seg in lines[-1])


def test_close_prints_the_whole_reply_once_as_markdown():
    console, out = _terminal()
    live = LiveMarkdown(console, fps=1000)
    for i in range(0, len(REPLY), 5):
        live.append(REPLY[i : i + 5])
        assert live.active
    assert live.close() == REPLY
    assert not live.active
    final = _final(out)
    assert "**" not in final and "bold" in final
    assert final.count("item 0") == 1 and final.count("item 29") == 1
    assert "•" in final  # list bullets: rendered, not raw "- "


def test_close_without_text_prints_nothing():
    console, out = _terminal()
    assert LiveMarkdown(console).close() == ""
    assert out.getvalue() == ""


def _view(console: Console, **config) -> ReplyView:
    app = types.SimpleNamespace(
        console=console, config=ChatConfig(**config), reply_logprobs=LogprobsState()
    )
    return ReplyView(app)


def test_reply_view_streams_markdown_on_a_terminal():
    console, out = _terminal()
    view = _view(console)
    for i in range(0, len(REPLY), 7):
        view(Event(kind=EventKind.TEXT, text=REPLY[i : i + 7]))
    view.end_line()
    final = _final(out)
    assert "**" not in final and "•" in final


def test_reply_view_streams_plain_text_elsewhere_or_without_markdown():
    for console, out, config in (
        (*_terminal(), {"markdown": False}),
        (Console(file=io.StringIO(), width=40), None, {}),
    ):
        out = out or console.file
        view = _view(console, **config)
        view(Event(kind=EventKind.TEXT, text="Some **bold**"))
        view.end_line()
        assert "Some **bold**" in out.getvalue()


def test_reasoning_after_reply_text_ends_the_live_area_first():
    console, out = _terminal()
    view = _view(console, show_reasoning=True)
    view(Event(kind=EventKind.TEXT, text="Some **bold** words."))
    view(Event(kind=EventKind.REASONING, text="thinking again"))
    assert not view._live.active
    view.end_line()
    text = out.getvalue()
    before = text[: text.rindex("thinking again")]
    shown = before[before.rfind("\x1b[2K") + len("\x1b[2K") :]  # after the live area went
    assert "bold" in shown and "**" not in shown  # the reply was printed as markdown first


def test_the_live_area_is_redrawn_as_text_arrives_and_not_for_nothing():
    console, out = _terminal(height=20)
    live = LiveMarkdown(console, fps=1000)
    live.append("- item 1\n")
    for i in range(2, 5):
        time.sleep(0.1)  # longer than a redraw of a short reply waits
        live.append(f"- item {i}\n")
        assert f"item {i}" in out.getvalue()  # shown while streaming, before close
    size = len(out.getvalue())
    live.append("")
    assert len(out.getvalue()) == size  # an empty delta draws nothing
    assert live.close() == "".join(f"- item {i}\n" for i in range(1, 5))


def test_reasoning_streamed_before_the_reply_ends_its_line_first():
    for console, out in (_terminal(), (Console(file=io.StringIO(), width=40), None)):
        out = out or console.file
        view = _view(console, markdown=console.is_terminal, show_reasoning=True)
        view(Event(kind=EventKind.REASONING, text="thinking"))
        view(Event(kind=EventKind.TEXT, text="the answer"))
        view.end_line()
        text = out.getvalue()
        assert "thinking\n" in text
        assert text.index("thinking") < text.rindex("the answer")
