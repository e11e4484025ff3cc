# SPDX-License-Identifier: MIT
"""The foreground task: Ctrl+C cancels only it; a cancellation from outside is not a
Ctrl+C and goes on up; with nothing running, Ctrl+C has nothing to cancel."""

from __future__ import annotations

import asyncio

import pytest

from mp13chat._foreground import Foreground


def _foreground(events: list[str]) -> Foreground:
    return Foreground(
        on_error=lambda exc: events.append(f"error {exc}"),
        on_cancel=lambda: events.append("cancelled"),
        stdin=None,
    )


def test_ctrl_c_with_nothing_running_cancels_nothing():
    assert _foreground([]).cancel() is False


def test_a_task_cancelled_from_outside_propagates_and_is_not_reported():
    events: list[str] = []
    fg = _foreground(events)

    async def main() -> None:
        await asyncio.wait_for(fg.run(asyncio.sleep(10)), 0.05)  # the outer timeout cancels

    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert events == []  # no "cancelled" line: it was no Ctrl+C
    assert fg.cancel() is False  # and nothing is left running
