# SPDX-License-Identifier: MIT
"""``/replay``: re-run a conversation on the loaded model into a new conversation and
compare the replies turn by turn (``mp13_context.areplay``).

The replay's approvals go through the same inline prompt as chatting (a foreign
session never brings its own permissions); a line says which user turn is being
replayed ("turn 3 of 12: ..."), and Ctrl+C stops it, keeping the turns replayed so far
in the new conversation. Afterwards the REPL moves to the new conversation.

The table's speed columns are the reply footer's figures (``_reply``), original /
replayed: ``first token`` (sending to the first generated token: queueing and the
prompt's computation) and ``tok/s``, the decode rate after the first token. The prompt's
computation is left out of ``tok/s``: counted in it (``RequestMetrics.tokens_per_s``), a
replayed turn whose prompt was not cached read as a model decoding several times slower.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from mp13_context import ReplayProgress, ReplayReport, areplay
from mp13_engine import RequestMetrics
from mp13_toolbox import ToolCall
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._registry import Command, CommandLine, command
from mp13chat._repl import Repl
from mp13chat._reply import decode_rate, seconds
from mp13chat._tree import short, snippet

SNIP = 50


def _calls(calls: Sequence[ToolCall]) -> str:
    return ", ".join(c.name for c in calls) or "-"


def _first_token(metrics: RequestMetrics | None) -> str:
    return seconds(metrics.ttft_s) if metrics is not None and metrics.ttft_s is not None else "-"


def _decode_rate(metrics: RequestMetrics | None) -> str:
    rate = decode_rate(metrics) if metrics is not None else None
    return f"{rate:.1f}" if rate is not None else "-"


def report_table(report: ReplayReport) -> render.FitTable:
    """The per-turn comparison of a ``ReplayReport``."""
    rows = []
    for t in report.turns:
        same = Text("same", style="mp13.ok") if t.text_equal else Text("differs", style="mp13.warn")
        calls_same = "=" if t.tool_calls_equal else "≠"
        rows.append(
            (
                t.index + 1,
                snippet(t.user_text, SNIP),
                snippet(t.original_text, SNIP),
                snippet(t.replayed_text, SNIP),
                same,
                f"{t.similarity:.2f}",
                f"{_calls(t.original_tool_calls)} {calls_same} {_calls(t.replayed_tool_calls)}",
                f"{_first_token(t.original_metrics)} / {_first_token(t.replayed_metrics)}",
                f"{_decode_rate(t.original_metrics)} / {_decode_rate(t.replayed_metrics)}",
            )
        )
    return render.table(
        f"replay: {report.equal_count}/{len(report.turns)} replies identical, "
        f"mean similarity {report.mean_similarity:.2f}",
        ("#", "user", "original", "replayed", "text", "sim", "tool calls", "first token", "tok/s"),
        rows,
    )


@command(
    "replay", group="session", usage="/replay ID|TITLE", complete=position.complete_conversations
)
async def replay(repl: Repl, line: CommandLine) -> None:
    """Replay a conversation's main line on the loaded model into a new conversation
    and show a comparison table (text, similarity, tool calls, speed)."""
    source = position.find_conversation(repl, line.require_text("a conversation id or title"))
    render.print_info(repl.console, f"replaying {short(source)} …")

    def progress(report: ReplayProgress) -> None:
        # One line as each turn starts: the table comes at the end, this says how far
        # a long replay is (and where Ctrl+C stopped it).
        if report.turn is None:
            render.print_info(repl.console, report.message)

    report = await areplay(
        source,
        into=repl.session,
        engine=repl.engine,
        toolbox=repl.toolbox,
        approval=repl.context.approval,
        progress=progress,
    )
    repl.console.print(report_table(report))
    repl.cursor = repl.context.cursor(at=report.leaf_node_id)
    render.print_ok(
        repl.console, f"now in the replayed conversation {short(report.conversation_id)}"
    )


COMMANDS: tuple[Command[Repl], ...] = (replay,)
