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

from mp13_context import Event, EventKind
from mp13chat import _convo as convo
from mp13chat import _render as render
from mp13chat._live import LiveMarkdown
from mp13chat._oneshot import refuse

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

    def __call__(self, event: Event) -> None:
        match event.kind:
            case EventKind.TEXT:
                self._on_text(event)
            case EventKind.REASONING:
                self._on_reasoning(event)
            case EventKind.TOOL_CALL:
                self._on_tool_call(event)
            case EventKind.TOOL_RESULT:
                self._on_tool_result(event)
            case EventKind.TURN:
                self._on_turn(event)

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
        if turn.cancelled:  # the footer says so: no second "cancelled" line
            self.app.cancel_reported()

    def finish(self) -> None:
        self._end_line()


def footer(turn: Any) -> Text:
    """``12 tokens · 40.1 tok/s · stop`` plus any flags or the error of a turn."""
    parts: list[tuple[str, str]] = []
    metrics = turn.metrics
    if metrics is not None:
        parts.append((f"{metrics.completion_tokens} tokens", "mp13.info"))
        if metrics.tokens_per_s:
            parts.append((f"{metrics.tokens_per_s:.1f} tok/s", "mp13.info"))
        if metrics.adapters:
            parts.append(("adapters " + ",".join(metrics.adapters), "mp13.info"))
    if turn.finish_reason is not None and not turn.cancelled:
        parts.append((getattr(turn.finish_reason, "value", str(turn.finish_reason)), "mp13.info"))
    if turn.truncated:
        parts.append(("truncated: /continue goes on", "mp13.warn"))
    if turn.cancelled:
        parts.append(("cancelled (partial reply kept)", "mp13.warn"))
    if turn.error:
        parts.append((f"error: {turn.error}", "mp13.error"))
    text = Text()
    for i, (part, style) in enumerate(parts):
        if i:
            text.append(" · ", style="mp13.info")
        text.append(part, style=style)
    return text


async def run_exchange(app: ChatApp, start: Callable[[ReplyView], Awaitable[Any]]) -> Any:
    """Run one exchange with a ``ReplyView`` (ending its last line however it ends)."""
    view = ReplyView(app)
    try:
        return await start(view)
    finally:
        view.finish()


async def ask(app: ChatApp, text: str) -> Any:
    """Send ``text`` from the current cursor and show the reply; an untitled conversation
    is named after its first question."""
    convo.check_branch_adapters(app)
    convo.title_if_untitled(app, text)
    return await run_exchange(app, lambda view: app.cursor.aask(text, on_event=view))


def same_reply_reason(request: Any) -> str | None:
    """Why a retry of ``request`` (the engine request of this branch) gives the same reply
    again, and how to change that; None when it samples without a fixed seed."""
    if getattr(request, "seed", None) is not None and _samples(request):
        return (
            f"seed {request.seed} makes sampling repeat itself; /unset seed gives a new "
            "reply each time"
        )
    if not _samples(request):
        return (
            "decoding is greedy (do_sample is off), so the same prompt always gives the "
            "same reply; /set do_sample on and /set temperature 0.8 sample a different one"
        )
    return None


def _content(turn: Any) -> tuple[str, list[tuple[str, Any]]]:
    # Tool-call ids are generated per reply; the calls themselves are name + arguments.
    return turn.text, [(c.name, c.arguments) for c in turn.tool_calls]


def _samples(request: Any) -> bool:
    do_sample = getattr(request, "do_sample", None)
    if do_sample is None:  # left to the temperature: a positive one samples
        return bool(getattr(request, "temperature", 0) or 0) > 0
    return bool(do_sample)


async def retry(app: ChatApp) -> Any:
    """A new reply to the last message; says why when it equals the reply it replaces."""
    convo.check_branch_adapters(app)
    old = [t for t in app.cursor.exchange() if t.role.value == "assistant"]
    turn = await run_exchange(app, lambda view: app.cursor.aretry(on_event=view))
    if not old or turn is None or turn.cancelled or turn.error:
        return turn
    if _content(turn) == _content(old[-1]):
        reason = same_reply_reason(app.cursor.request())
        if reason is not None:
            render.print_info(app.console, f"same reply as before: {reason}")
    return turn


async def approve(app: ChatApp, request: Any) -> str:
    """Ask whether a tool call may run (the context's approver)."""
    from mp13_toolbox import ApprovalAnswer

    if not app.interactive:
        return refuse(app, request)
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
