# SPDX-License-Identifier: MIT
"""One-shot mode: ``mp13chat -p QUESTION`` (or piped input) answers once and exits.

The answer — and only the answer — goes to standard output, streamed as plain text
(no markdown, no colours) and ended with a newline, so it can be piped or captured
(on a terminal, control characters in it are shown, not obeyed: ``_safe_console``).
Everything else goes to standard error through the app's console: loading progress on
a terminal, tool calls and results, a note when the answer was cut at the token limit,
and errors. No banner. Tools run under their approval policy, but nobody can be asked:
``refuse`` is the approver, so a tool that needs approval is refused (the model gets
the refusal) and a line on standard error says how to allow it. ``ChatApp`` runs the
exchange (``_answer_once``): exit status 0 answered, 1 the start or the answer failed
(an engine error, a recorded turn error).
"""

from __future__ import annotations

from typing import IO

from rich.console import Console

from mp13_context import Event, EventKind, Role
from mp13_toolbox import ApprovalAnswer, ApprovalRequest
from mp13chat import _render as render
from mp13chat._safe_console import terminal_safe
from mp13chat._terminal import is_terminal


class AnswerView:
    """Event callback of a one-shot exchange: text to ``out``, the rest to ``console``."""

    def __init__(self, console: Console, out: IO[str], *, stream: bool) -> None:
        self.console = console
        self.out = out
        self.stream = stream
        self._wrote = False
        self._ends_with_newline = True
        self._terminal = is_terminal(out)

    def _write(self, text: str) -> None:
        # Raw text when piped (it is data); on a terminal, control sequences the model or
        # a tool wrote are shown, not obeyed (``_safe_console``).
        self.out.write(terminal_safe(text) if self._terminal else text)
        self.out.flush()
        self._wrote = True
        self._ends_with_newline = text.endswith("\n")

    def __call__(self, event: Event) -> None:
        match event.kind:
            case EventKind.TEXT if self.stream and event.text:
                self._write(event.text)
            case EventKind.TOOL_CALL if event.tool_call is not None:
                self.end_line()
                self.console.print(render.tool_call_panel(event.tool_call))
            case EventKind.TOOL_RESULT if event.tool_result is not None:
                self.console.print(render.tool_result_panel(event.tool_result))
            case EventKind.TURN if event.turn is not None and event.turn.role is Role.ASSISTANT:
                if not self.stream and event.turn.text:
                    self._write(event.turn.text)
                self.end_line()

    def end_line(self) -> None:
        """End the answer's last line (the answer always ends with a newline)."""
        if self._wrote and not self._ends_with_newline:
            self._write("\n")


def refuse(console: Console, request: ApprovalRequest) -> ApprovalAnswer:
    """The approver of a one-shot run: nobody can answer, so the call is refused."""
    name = request.call.name
    render.print_warning(
        console,
        f"tool {name} needs approval, which a one-shot run cannot ask for: refused. "
        f'Allow it in the config file ("tool_approvals": {{"{name}": "allow"}}) or ask '
        "in the REPL.",
    )
    return ApprovalAnswer.NO
