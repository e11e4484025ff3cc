# SPDX-License-Identifier: MIT
"""The reply footer's speed figures: time to the first token, then the decode rate.

Was: the footer showed ``RequestMetrics.tokens_per_s``, whose time includes computing
the prompt, so the first reply of a session (a 500-token prompt with the tools'
descriptions) read 4 tok/s on a model that generates at 9.
"""

from __future__ import annotations

from mp13_context import Role, Turn
from mp13_context.testing import FakeEngine
from mp13_engine import FinishReason, RequestMetrics
from mp13chat._reply import decode_rate, footer, seconds


def reply(**metrics: object) -> Turn:
    return Turn(
        role=Role.ASSISTANT,
        text="x",
        finish_reason=FinishReason.STOP,
        metrics=RequestMetrics(**metrics),  # type: ignore[arg-type]
    )


def test_a_slow_prompt_does_not_lower_the_rate():
    # 2 s computing the prompt, then 9 tokens in 1 s: 9 tok/s, not 10 / 3 s.
    turn = reply(completion_tokens=10, ttft_s=2.0, total_s=3.0, tokens_per_s=10 / 3)
    text = footer(turn).plain
    assert text == "10 tokens · first token 2.0 s · 9.0 tok/s · stop"
    assert "3.3" not in text


def test_one_token_has_a_first_token_time_and_no_rate():
    turn = reply(completion_tokens=1, ttft_s=0.25, total_s=0.25, tokens_per_s=4.0)
    assert footer(turn).plain == "1 token · first token 0.25 s · stop"
    assert decode_rate(turn.metrics) is None  # type: ignore[arg-type]


def test_no_token_shows_neither_figure():
    turn = reply(completion_tokens=0, ttft_s=None, total_s=1.0)
    assert footer(turn).plain == "0 tokens · stop"


def test_no_time_between_tokens_gives_no_rate():
    metrics = RequestMetrics(completion_tokens=3, ttft_s=1.0, total_s=1.0)
    assert decode_rate(metrics) is None


def test_seconds_are_short():
    assert [seconds(v) for v in (0.034, 0.5, 2.23, 14.6)] == ["0.03 s", "0.50 s", "2.2 s", "15 s"]


def test_the_repl_footer_shows_both_figures(make_chat):
    h = make_chat(FakeEngine(["one two three four"], delay_s=0.01))
    out = h.run("hi")
    assert "first token " in out and " tok/s" in out
    turn = h.app.cursor.node.turn
    rate = decode_rate(turn.metrics)
    assert rate is not None and f"{rate:.1f} tok/s" in out
