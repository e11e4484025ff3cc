# SPDX-License-Identifier: MIT
"""Showing a reply as it happens, and asking for tool approval inline.

``ReplyView`` is the runner's event callback (``mp13_context`` events): with streaming
on, text deltas show as they arrive (reasoning dimmed): on a terminal, with markdown
on, as markdown re-rendered while it grows (``_live``), elsewhere as plain text broken
between words at the console's width (``_stream_wrap``); with
streaming off, the finished reply prints as markdown. Tool calls and results print as
panels between rounds; a footer line gives tokens, speed and how the reply ended
(and, with ``logprobs`` on, the reply's perplexity; its log-probabilities are kept in
the REPL's ``reply_logprobs`` for ``/logprobs``). The
view keeps only what it needs to end lines cleanly and to name a failed tool's
arguments; everything else is in the recorded turns. A failed tool's traceback (kept on
its result, never sent to the model) becomes the REPL's newest error, the one ``/error``
shows, and its panel says so.

The footer's speed is what a user waits for, in two figures: ``first token 2.2 s`` (from
sending the request to its first generated token: queueing and computing the prompt)
and the decode rate, ``tok/s`` over the tokens after the first (``decode_rate``).
``RequestMetrics.tokens_per_s`` counts the prompt's computation in its time, so a short
reply to a long new prompt (the first turn, with the tools' descriptions) read as a
model generating at a fraction of its speed.

``approve`` is the toolbox approver of an interactive app's context: it shows the call
and asks ``[y]es / [n]o / [a]lways / ne[v]er`` on the prompt line; Ctrl+C or Ctrl+D
there means no.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rich.text import Text

from mp13_context import Event, EventKind, Role, Turn
from mp13_engine import RequestMetrics
from mp13_toolbox import ApprovalAnswer, ApprovalRequest, ToolCall, ToolResult, plural
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._live import LiveMarkdown
from mp13chat._logprobs import Logprobs, perplexity
from mp13chat._repl import Repl
from mp13chat._safe_console import terminal_safe
from mp13chat._stream_wrap import StreamWrap

STREAM_STYLES = {EventKind.TEXT: "mp13.reply", EventKind.REASONING: "mp13.reasoning"}


class ReplyView:
    """Renders one exchange's events on the REPL's console (see the module docstring)."""

    def __init__(self, repl: Repl) -> None:
        self.repl = repl
        self.console = repl.console
        self.stream = repl.config.stream
        self.show_reasoning = repl.config.show_reasoning
        self._open: EventKind | None = None  # what a streamed line waiting for its newline holds
        self._wrap = StreamWrap()  # breaks that line between words at the console's width
        live = self.stream and repl.config.markdown and self.console.is_terminal
        self._live = LiveMarkdown(self.console) if live else None
        # This exchange's calls by id: ``/error`` names a failed tool's arguments.
        self._calls: dict[str, ToolCall] = {}

    def _write(self, event: Event) -> None:
        if self._live is not None and self._live.active:  # reasoning after reply text
            self._live.close()
        if self._open is not None and self._open is not event.kind:
            self.end_line()
        self._open = event.kind
        # wrapped as shown: the console shows a control character as one visible cell
        self._print(self._wrap.feed(terminal_safe(event.text), self.console.width))

    def _print(self, text: str) -> None:
        # soft_wrap: printed as it is; _wrap has already broken it between words
        if text and self._open is not None:
            self.console.print(Text(text, style=STREAM_STYLES[self._open]), end="", soft_wrap=True)

    def end_line(self) -> None:
        """End whatever is open: the live markdown area, a streamed line."""
        if self._live is not None:
            self._live.close()
        if self._open is not None:
            self._print(self._wrap.flush(self.console.width))
            self.console.print()
            self._open = None

    def __call__(self, event: Event) -> None:
        self.repl.reply_logprobs.observe(event)
        match event.kind:
            case EventKind.TEXT if self.stream and event.text:
                if self._live is None:
                    self._write(event)
                    return
                if self._open is not None:  # streamed reasoning before the reply
                    self.end_line()
                self._live.append(event.text)
            case EventKind.REASONING if self.stream and self.show_reasoning and event.text:
                self._write(event)
            case EventKind.TOOL_CALL if event.tool_call is not None:
                self.end_line()
                if event.tool_call.id is not None:
                    self._calls[event.tool_call.id] = event.tool_call
                self.console.print(render.tool_call_panel(event.tool_call))
            case EventKind.TOOL_RESULT if event.tool_result is not None:
                self.end_line()
                self._show_result(event.tool_result)
            case EventKind.TURN if event.turn is not None and event.turn.role is Role.ASSISTANT:
                logprobs = event.response.logprobs if event.response is not None else None
                self._show_turn(event.turn, logprobs)

    def _show_result(self, result: ToolResult) -> None:
        """The result's panel; a failure with a traceback becomes the newest error, the
        one ``/error`` shows (the model read only the panel's text)."""
        if result.traceback is not None:
            call = self._calls.get(result.call_id) if result.call_id is not None else None
            self.repl.last_traceback = render.tool_error_text(result, call)
        self.console.print(render.tool_result_panel(result, error_hint=True))

    def _show_turn(self, turn: Turn, logprobs: Logprobs | None) -> None:
        self.end_line()
        if not self.stream:
            if self.show_reasoning:
                render.print_reasoning(self.console, turn.reasoning)
            render.print_reply(self.console, turn.text, markdown=self.repl.config.markdown)
        self.console.print(footer(turn, logprobs))
        if turn.cancelled:  # the footer says so: no second "cancelled" line
            self.repl.cancel_reported()


def seconds(value: float) -> str:
    """``0.27 s``, ``2.2 s``, ``14 s``: two significant figures or whole seconds."""
    if value < 1:
        return f"{value:.2f} s"
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def decode_rate(metrics: RequestMetrics) -> float | None:
    """Tokens per second after the first token (``None``: fewer than two tokens, or no
    time measured between them): the model's generation speed, without the prompt's
    computation that ``RequestMetrics.tokens_per_s`` counts."""
    if metrics.ttft_s is None or metrics.completion_tokens < 2:
        return None
    elapsed = metrics.total_s - metrics.ttft_s
    return (metrics.completion_tokens - 1) / elapsed if elapsed > 0 else None


def footer(turn: Turn, logprobs: Logprobs | None = None) -> Text:
    """``12 tokens · first token 0.40 s · 40.1 tok/s · stop`` plus any flags or the error
    of a turn (the speed figures: see the module docstring); with the reply's
    ``logprobs`` (``/set logprobs true``), its perplexity after the speed."""
    parts: list[tuple[str, str]] = []
    metrics = turn.metrics
    if metrics is not None:
        parts.append((plural(metrics.completion_tokens, "token"), "mp13.info"))
        if metrics.ttft_s is not None:
            parts.append((f"first token {seconds(metrics.ttft_s)}", "mp13.info"))
        rate = decode_rate(metrics)
        if rate is not None:
            parts.append((f"{rate:.1f} tok/s", "mp13.info"))
        if metrics.adapters:
            parts.append(("adapters " + ",".join(metrics.adapters), "mp13.info"))
    ppl = perplexity(logprobs) if logprobs is not None else None
    if ppl is not None:
        parts.append((f"perplexity {ppl:.2f}", "mp13.info"))
    if turn.finish_reason is not None and not turn.cancelled:
        parts.append((turn.finish_reason.value, "mp13.info"))
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


async def run_exchange(
    repl: Repl, start: Callable[[ReplyView], Awaitable[Turn | None]]
) -> Turn | None:
    """Run one exchange with a ``ReplyView`` (ending its last line however it ends),
    after checking the adapters this branch uses are loaded."""
    position.require_adapters(repl)
    view = ReplyView(repl)
    try:
        return await start(view)
    finally:
        view.end_line()


async def ask(repl: Repl, text: str) -> Turn | None:
    """Send ``text`` from the current cursor and show the reply; an untitled conversation
    is named after its first question."""

    def start(view: ReplyView) -> Awaitable[Turn]:
        position.title_if_untitled(repl, text)
        return repl.cursor.aask(text, on_event=view)

    return await run_exchange(repl, start)


async def approve(repl: Repl, request: ApprovalRequest) -> ApprovalAnswer:
    """Ask whether a tool call may run (the context's approver)."""
    # The call's panel is already on screen (the TOOL_CALL event comes first).
    name = request.call.name
    question = f"run {name} ({request.risk.value} risk)? [y]es / [n]o / [a]lways / ne[v]er: "
    # Read as the toolbox reads any approver's reply: anything but a clear yes is "no".
    choice = ApprovalAnswer.parse(await repl.ask_user(question))
    render.print_info(repl.console, f"{name}: {choice.value}")
    return choice
