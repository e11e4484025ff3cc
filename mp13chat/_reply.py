# SPDX-License-Identifier: MIT
"""Showing a reply as it happens, and asking for tool approval inline.

``ReplyView`` is the runner's event callback (``mp13_context`` events): with streaming
on, text deltas show as they arrive (reasoning dimmed): on a terminal, with markdown
on, as markdown re-rendered while it grows (``_live``), elsewhere as plain text; with
streaming off, the finished reply prints as markdown. Tool calls and results print as
panels between rounds; a footer line gives tokens, speed and how the reply ended. The
view keeps only what it needs to end lines cleanly; everything else is in the recorded
turns.

``approve`` is the toolbox approver of the app's context: it shows the call and asks
``[y]es / [n]o / [a]lways / ne[v]er`` on the prompt line; Ctrl+C or Ctrl+D there
means no.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text

from mp13chat import _render as render
from mp13chat._live import LiveMarkdown

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


class ReplyView:
    """Renders one exchange's events on the app's console (see the module docstring)."""

    def __init__(self, app: ChatApp) -> None:
        self.app = app
        self.console = app.console
        self.stream = app.config.stream
        self.show_reasoning = app.config.show_reasoning
        self._open_line = False  # a streamed line is waiting for its newline
        self._mode = ""  # "text" / "reasoning": what the open line holds
        self.turns: list[Any] = []
        live = self.stream and app.config.markdown and self.console.is_terminal
        self._live = LiveMarkdown(self.console) if live else None

    def _write(self, text: str, style: str, mode: str) -> None:
        if self._live is not None and self._live.active:  # reasoning after reply text
            self._live.close()
        if self._open_line and self._mode != mode:
            self._end_line()
        self.console.print(Text(text, style=style), end="", soft_wrap=True)
        self._open_line = True
        self._mode = mode

    def _end_line(self) -> None:
        if self._live is not None:
            self._live.close()
        if self._open_line:
            self.console.print()
            self._open_line = False

    def __call__(self, event: Any) -> None:
        kind = event.kind.value
        handler: Callable[[Any], None] | None = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(event)

    def _on_text(self, event: Any) -> None:
        if not (self.stream and event.text):
            return
        if self._live is None:
            self._write(event.text, "mp13.reply", "text")
            return
        if self._open_line:  # streamed reasoning before the reply: end its line first
            self._end_line()
        self._live.append(event.text)

    def _on_reasoning(self, event: Any) -> None:
        if self.stream and self.show_reasoning and event.text:
            self._write(event.text, "mp13.reasoning", "reasoning")

    def _on_tool_call(self, event: Any) -> None:
        self._end_line()
        if event.tool_call is not None:
            self.console.print(render.tool_call_panel(event.tool_call))

    def _on_tool_result(self, event: Any) -> None:
        self._end_line()
        if event.tool_result is not None:
            self.console.print(render.tool_result_panel(event.tool_result))

    def _on_turn(self, event: Any) -> None:
        turn = event.turn
        if turn is None or turn.role.value != "assistant":
            return
        self._end_line()
        self.turns.append(turn)
        if not self.stream:
            if self.show_reasoning:
                render.print_reasoning(self.console, turn.reasoning)
            render.print_reply(self.console, turn.text, markdown=self.app.config.markdown)
        self.console.print(footer(turn))

    def finish(self) -> None:
        self._end_line()


def footer(turn: Any) -> Text:
    """``12 tokens · 40.1 tok/s · stop`` plus any flags or the error of a turn."""
    parts: list[str] = []
    metrics = turn.metrics
    if metrics is not None:
        parts.append(f"{metrics.completion_tokens} tokens")
        if metrics.tokens_per_s:
            parts.append(f"{metrics.tokens_per_s:.1f} tok/s")
        if metrics.adapters:
            parts.append("adapters " + ",".join(metrics.adapters))
    if turn.finish_reason is not None and not turn.cancelled:
        parts.append(getattr(turn.finish_reason, "value", str(turn.finish_reason)))
    text = Text(" · ".join(parts), style="mp13.info")
    if turn.truncated:
        text.append("  truncated: /continue goes on", style="mp13.warn")
    if turn.cancelled:
        text.append("  cancelled (partial reply kept)", style="mp13.warn")
    if turn.error:
        text.append(f"  error: {turn.error}", style="mp13.error")
    return text


async def run_exchange(app: ChatApp, start: Callable[[ReplyView], Awaitable[Any]]) -> Any:
    """Run one exchange with a ``ReplyView`` (ending its last line however it ends)."""
    view = ReplyView(app)
    try:
        return await start(view)
    finally:
        view.finish()


async def ask(app: ChatApp, text: str) -> Any:
    """Send ``text`` from the current cursor and show the reply."""
    return await run_exchange(app, lambda view: app.cursor.aask(text, on_event=view))


async def approve(app: ChatApp, request: Any) -> str:
    """Ask whether a tool call may run (the context's approver)."""
    from mp13_toolbox import ApprovalAnswer

    # The call's panel is already on screen (the TOOL_CALL event comes first).
    risk = getattr(request.risk, "value", request.risk)
    question = f"run {request.call.name} ({risk} risk)? [y]es / [n]o / [a]lways / ne[v]er: "
    answer = (await app.ask_user(question)).strip().lower()
    choice = {
        "y": ApprovalAnswer.YES,
        "yes": ApprovalAnswer.YES,
        "a": ApprovalAnswer.ALWAYS,
        "always": ApprovalAnswer.ALWAYS,
        "v": ApprovalAnswer.NEVER,
        "never": ApprovalAnswer.NEVER,
    }.get(answer, ApprovalAnswer.NO)
    render.print_info(app.console, f"{request.call.name}: {choice.value}")
    return choice
