# SPDX-License-Identifier: MIT
"""One-shot mode: ``mp13chat -p QUESTION`` (or piped input) answers once and exits.

The answer — and only the answer — goes to standard output, streamed as plain text
(no markdown, no colours) and ended with a newline, so it can be piped or captured.
Everything else goes to standard error through the app's console: loading progress on
a terminal, tool calls and results, a note when the answer was cut at the token limit,
and errors. No banner. Tools run under their approval policy, but nobody can be asked:
a tool that needs approval is refused (the model gets the refusal) and a line on
standard error says how to allow it. Exit status: 0 answered, 1 the start or the
answer failed (an engine error, a recorded turn error).
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Any

from mp13_context import Event, EventKind, Role
from mp13chat import _convo as convo
from mp13chat import _render as render

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp


class AnswerView:
    """Event callback of a one-shot exchange: text to ``out``, the rest to the console."""

    def __init__(self, app: ChatApp, out: IO[str]) -> None:
        self.app = app
        self.out = out
        self.stream = app.config.stream
        self._ends_with_newline = True
        self.wrote = False

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.wrote = True
        self._ends_with_newline = text.endswith("\n")

    def __call__(self, event: Event) -> None:
        match event.kind:
            case EventKind.TEXT if self.stream and event.text:
                self._write(event.text)
            case EventKind.TOOL_CALL if event.tool_call is not None:
                self._end_line()
                self.app.console.print(render.tool_call_panel(event.tool_call))
            case EventKind.TOOL_RESULT if event.tool_result is not None:
                self.app.console.print(render.tool_result_panel(event.tool_result))
            case EventKind.TURN if event.turn is not None and event.turn.role is Role.ASSISTANT:
                if not self.stream and event.turn.text:
                    self._write(event.turn.text)
                self._end_line()

    def _end_line(self) -> None:
        if self.wrote and not self._ends_with_newline:
            self._write("\n")


async def answer_once(app: ChatApp, question: str, out: IO[str] | None = None) -> int:
    """Start ``app`` (quietly), ask ``question``, print the answer; return the exit status."""
    out = out if out is not None else sys.stdout
    try:
        try:
            await app.start()
        except Exception as exc:
            app.report_start_failure(exc)
            return 1
        view = AnswerView(app, out)
        try:
            convo.title_if_untitled(app, question)
            turn = await app.cursor.aask(question, on_event=view)
        except Exception as exc:
            render.print_start_error(app.console, exc)
            return 1
        finally:
            view._end_line()
        if turn.error:
            render.print_start_error(app.console, turn.error)
            return 1
        if turn.truncated:
            render.print_warning(
                app.console,
                "the answer was cut at max_new_tokens; --max-new-tokens N allows a longer one",
            )
        return 0
    finally:
        await app.aclose()


def refuse(app: ChatApp, request: Any) -> Any:
    """The approver of a one-shot run: nobody can answer, so the call is refused."""
    from mp13_toolbox import ApprovalAnswer

    name = request.call.name
    render.print_warning(
        app.console,
        f"tool {name} needs approval, which a one-shot run cannot ask for: refused. "
        f'Allow it in the config file ("tool_approvals": {{"{name}": "allow"}}) or ask '
        "in the REPL.",
    )
    return ApprovalAnswer.NO
