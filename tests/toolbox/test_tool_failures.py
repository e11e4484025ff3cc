# SPDX-License-Identifier: MIT
"""What a tool raises is its result; async tools that block still time out (issue 11.9, 11.11).

Every ``BaseException`` a tool raises (``SystemExit`` from argparse, ``GeneratorExit``,
its own ``CancelledError``, a ``KeyboardInterrupt`` on its worker thread) comes back as
an error result from ``execute`` and ``aexecute``. Only what belongs to the caller
propagates: the cancellation of the awaiting task, and Ctrl+C on the calling thread.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import time

import pytest

from mp13_toolbox import Toolbox, ToolCall

RAISED = {
    "SystemExit": lambda: SystemExit(2),
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
    "KeyboardInterrupt": KeyboardInterrupt,
    "RuntimeError": lambda: RuntimeError("kaput"),
}
EXPECTED = {
    "SystemExit": "exited (SystemExit, status 2)",
    "GeneratorExit": "failed: GeneratorExit",
    "CancelledError": "was cancelled from inside",
    "KeyboardInterrupt": "failed: KeyboardInterrupt",
    "RuntimeError": "failed: RuntimeError: kaput",
}


def raising_box(kind: str, timeout_s: float | None = 5.0) -> Toolbox:
    tb = Toolbox(default_timeout_s=timeout_s)
    make = RAISED[kind]

    @tb.register
    def sync_tool() -> str:
        raise make()

    @tb.register
    async def async_tool() -> str:
        await asyncio.sleep(0)
        raise make()

    return tb


@pytest.mark.parametrize("kind", list(RAISED))
@pytest.mark.parametrize("tool", ["sync_tool", "async_tool"])
def test_execute_turns_whatever_a_tool_raises_into_a_result(kind, tool):
    r = raising_box(kind).execute(ToolCall(tool, id="c"))
    assert r.is_error and r.call_id == "c" and EXPECTED[kind] in r.content


@pytest.mark.parametrize("kind", list(RAISED))
@pytest.mark.parametrize("tool", ["sync_tool", "async_tool"])
def test_aexecute_turns_whatever_a_tool_raises_into_a_result(kind, tool):
    tb = raising_box(kind, timeout_s=None)

    async def main():
        result = await tb.aexecute(ToolCall(tool, id="c"))
        await asyncio.sleep(0)  # this task was not cancelled by the tool's CancelledError
        return result

    r = asyncio.run(main())
    assert r.is_error and r.call_id == "c" and EXPECTED[kind] in r.content


@pytest.mark.parametrize("kind", ["SystemExit", "GeneratorExit", "CancelledError"])
def test_an_inline_tool_without_timeout_is_caught_too(kind):
    r = raising_box(kind, timeout_s=None).execute(ToolCall("sync_tool"))
    assert r.is_error and EXPECTED[kind] in r.content


def test_ctrl_c_on_the_calling_thread_still_stops_the_program():
    # An inline tool runs on the caller's thread, where Ctrl+C lands: that is the user's.
    tb = raising_box("KeyboardInterrupt", timeout_s=None)
    with pytest.raises(KeyboardInterrupt):
        tb.execute(ToolCall("sync_tool"))


def waiting_in(thread_id: int) -> list[str]:
    """The functions of a thread's stack while it blocks in a ``wait``, innermost first."""
    frame = sys._current_frames().get(thread_id)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names if names[:1] == ["wait"] else []


def test_ctrl_c_while_execute_waits_stops_the_async_tool_too():
    tb = Toolbox()
    started, stopped = threading.Event(), threading.Event()

    @tb.register(timeout_s=60)
    async def wait_long() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()
        return "late"

    def press_ctrl_c() -> None:
        started.wait(5)
        main = threading.main_thread().ident
        assert main is not None
        deadline = time.monotonic() + 5
        # Until execute blocks waiting for the tool (not, say, in Thread.start's own wait).
        while time.monotonic() < deadline and "call_blocking" not in waiting_in(main):
            time.sleep(0.001)
        # A signal that lands after the main thread let go of the GIL but before its
        # lock wait began is not seen until the wait ends (a CPython race that this
        # thread, woken by that very GIL release, hits often; a person's Ctrl+C almost
        # never does): press again while execute still waits, as a person would.
        while time.monotonic() < deadline + 10 and "call_blocking" in waiting_in(main):
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.5)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        tb.execute(ToolCall("wait_long"))
    assert time.perf_counter() - t0 < 30  # not the tool's 60 s
    assert stopped.wait(5)  # the tool was cancelled, not left running


def test_an_argparse_tool_given_bad_arguments_gets_a_readable_error(capsys):
    tb = Toolbox()

    @tb.register
    def cli(argv: list[str]) -> str:
        """Run a command line.

        Args:
            argv: the arguments
        """
        parser = argparse.ArgumentParser(prog="cli")
        parser.add_argument("--count", type=int, required=True)
        return f"count={parser.parse_args(argv).count}"

    assert tb.execute(ToolCall("cli", {"argv": ["--count", "3"]})).content == "count=3"
    r = tb.execute(ToolCall("cli", {"argv": ["--count", "many"]}))
    assert r.is_error and "SystemExit, status 2" in r.content and "check the arguments" in r.content
    r = asyncio.run(tb.aexecute(ToolCall("cli", {"argv": []})))
    assert r.is_error and "SystemExit, status 2" in r.content
    assert "invalid int value" in capsys.readouterr().err  # argparse's own words, on stderr


def test_cancelling_the_awaiting_task_propagates_and_cancels_the_async_tool():
    tb = Toolbox(default_timeout_s=None)
    started, stopped = threading.Event(), threading.Event()

    @tb.register
    async def waits() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "late"

    async def main():
        task = asyncio.create_task(tb.aexecute(ToolCall("waits")))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(main())
    assert stopped.wait(5)


def test_a_blocking_async_tool_times_out_and_does_not_block_the_loop():
    tb = Toolbox()
    release = threading.Event()

    @tb.register(timeout_s=0.5)
    async def blocks() -> str:
        release.wait(3)  # a blocking call inside async def: time.sleep, requests.get, ...
        return "late"

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        result = await tb.aexecute(ToolCall("blocks"))
        elapsed = time.perf_counter() - t0
        task.cancel()
        return result, elapsed, ticks

    try:
        r, elapsed, ticks = asyncio.run(main())
        assert r.is_error and "timed out after 0.5 s" in r.content
        assert elapsed < 2.0  # the tool blocks for 3 s
        assert ticks >= 5  # the caller's loop ran meanwhile (0.5 s / 0.02 s = 25 on a quiet box)
        t0 = time.perf_counter()
        assert "timed out" in tb.execute(ToolCall("blocks")).content
        assert time.perf_counter() - t0 < 2.0
    finally:
        release.set()


def test_an_async_tool_runs_on_its_own_loop_not_the_callers():
    tb = Toolbox()
    loops = []

    @tb.register
    async def where() -> str:
        loops.append(asyncio.get_running_loop())
        return "here"

    async def main():
        await tb.aexecute(ToolCall("where"))
        return asyncio.get_running_loop()

    caller = asyncio.run(main())
    assert loops and loops[0] is not caller


class SlowText:
    """A value whose text takes long: a lazy query set, a proxy that fetches on str()."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def __str__(self) -> str:
        self.release.wait(3)
        return "slow"

    __repr__ = __str__


def test_a_value_slow_to_become_text_times_out_and_does_not_block_the_loop():
    tb = Toolbox()
    release = threading.Event()

    @tb.register(timeout_s=0.3)
    def lazy() -> object:
        return SlowText(release)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        result = await tb.aexecute(ToolCall("lazy"))
        elapsed = time.perf_counter() - t0
        task.cancel()
        return result, elapsed, ticks

    try:
        r, elapsed, ticks = asyncio.run(main())
        assert r.is_error and "timed out after 0.3 s" in r.content
        assert elapsed < 2.0  # the value's __str__ blocks for 3 s
        assert ticks >= 5  # rendering ran on the tool's thread, not on the caller's loop
        t0 = time.perf_counter()
        assert "timed out" in tb.execute(ToolCall("lazy")).content
        assert time.perf_counter() - t0 < 2.0
    finally:
        release.set()


class ExitsWhenShown:
    def __str__(self) -> str:
        raise SystemExit(1)

    __repr__ = __str__


@pytest.mark.parametrize("timeout_s", [5.0, None])  # on a worker thread, and inline
def test_a_value_whose_str_raises_system_exit_is_still_a_result(timeout_s):
    tb = Toolbox(default_timeout_s=timeout_s)

    @tb.register
    def odd() -> object:
        return ExitsWhenShown()

    for r in (tb.execute(ToolCall("odd")), asyncio.run(tb.aexecute(ToolCall("odd")))):
        assert not r.is_error
        assert "ExitsWhenShown that cannot be shown as text" in r.content


class ExitsWhenShownError(Exception):
    def __str__(self) -> str:
        raise SystemExit(1)

    __repr__ = __str__


def test_an_exception_whose_str_raises_system_exit_is_still_a_result():
    tb = Toolbox(default_timeout_s=None)

    @tb.register
    def odd() -> str:
        raise ExitsWhenShownError

    for r in (tb.execute(ToolCall("odd")), asyncio.run(tb.aexecute(ToolCall("odd")))):
        assert r.is_error
        assert "failed: ExitsWhenShownError: <a ExitsWhenShownError that cannot" in r.content


class Unshowable:
    def __str__(self) -> str:
        raise ValueError("no text")

    __repr__ = __str__


@pytest.mark.parametrize("timeout_s", [5.0, None])  # on a worker thread, and inline
def test_an_exit_status_that_cannot_be_shown_still_gives_the_exit_message(timeout_s):
    tb = Toolbox(default_timeout_s=timeout_s)

    @tb.register
    def exits_oddly() -> str:
        raise SystemExit(Unshowable())

    for r in (
        tb.execute(ToolCall("exits_oddly")),
        asyncio.run(tb.aexecute(ToolCall("exits_oddly"))),
    ):
        assert r.is_error
        assert r.content.startswith(
            "Tool 'exits_oddly' exited (SystemExit, status <a Unshowable that cannot be shown"
        )


# --- the traceback of a failure: kept for people, never sent to the model ---------------------


def _deep_helper(n: int) -> int:
    raise ValueError(f"no square root of {n}")


def traced_box(timeout_s: float | None) -> Toolbox:
    tb = Toolbox(default_timeout_s=timeout_s)

    @tb.register
    def sqrt(n: int) -> int:
        """A square root that fails inside a helper."""
        return _deep_helper(n)

    @tb.register
    async def asqrt(n: int) -> int:
        """The same, async."""
        await asyncio.sleep(0)
        return _deep_helper(n)

    return tb


@pytest.mark.parametrize("timeout_s", [None, 5.0])
@pytest.mark.parametrize("tool", ["sqrt", "asqrt"])
@pytest.mark.parametrize("run", ["execute", "aexecute"])
def test_a_raising_tool_keeps_its_traceback_down_to_the_line_that_raised(timeout_s, tool, run):
    tb = traced_box(timeout_s)
    call = ToolCall(tool, {"n": -4}, id="c")
    r = tb.execute(call) if run == "execute" else asyncio.run(tb.aexecute(call))
    assert r.traceback is not None
    lines = r.traceback.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: no square root of -4"
    # Where in the tool: its own frame and the helper's, with the line that raised.
    assert f"in {tool}" in r.traceback and "in _deep_helper" in r.traceback
    assert 'raise ValueError(f"no square root of {n}")' in r.traceback
    # The toolbox's frames above the tool say nothing about the tool: left out.
    assert "mp13_toolbox" not in r.traceback and "threading.py" not in r.traceback


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_the_model_sees_the_same_result_as_before_byte_for_byte(timeout_s):
    r = traced_box(timeout_s).execute(ToolCall("sqrt", {"n": -4}, id="c"))
    # The text the model reads, exactly as before tracebacks were kept, and no other key.
    expected = {
        "role": "tool",
        "name": "sqrt",
        "content": "Tool 'sqrt' failed: ValueError: no square root of -4",
        "tool_call_id": "c",
    }
    assert r.to_message() == expected
    assert "Traceback" not in repr(r.to_message())


def test_a_result_that_is_no_failure_has_no_traceback():
    tb = Toolbox()

    @tb.register
    def fine() -> str:
        """Fine."""
        return "ok"

    assert tb.execute(ToolCall("fine")).traceback is None
    # Refusals are not failures of code: nothing raised, no traceback.
    refused = tb.execute(ToolCall("fine", {"extra": 1}))
    assert refused.is_error and refused.traceback is None
    assert tb.execute(ToolCall("missing")).traceback is None


@pytest.mark.parametrize("run", ["execute", "aexecute"])
def test_a_timed_out_sync_tool_says_where_it_was_stuck(run):
    tb = Toolbox()
    release = threading.Event()

    @tb.register(timeout_s=0.3)
    def stuck() -> str:
        """Waits for an event that never comes."""
        release.wait(10)
        return "late"

    try:
        call = ToolCall("stuck")
        r = tb.execute(call) if run == "execute" else asyncio.run(tb.aexecute(call))
    finally:
        release.set()
    assert r.is_error and "timed out" in r.content
    assert r.traceback is not None
    assert r.traceback.startswith("Tool 'stuck' timed out after 0.3 s here:\n")
    assert "in stuck" in r.traceback and "release.wait(10)" in r.traceback
    assert "Traceback" not in r.content


def test_a_timed_out_async_tool_says_which_await_it_was_in():
    tb = Toolbox()

    async def inner() -> None:
        await asyncio.sleep(10)

    @tb.register(timeout_s=0.3)
    async def waiting() -> str:
        """Awaits too long."""
        await inner()
        return "late"

    r = tb.execute(ToolCall("waiting"))
    assert r.traceback is not None
    assert "in waiting" in r.traceback and "in inner" in r.traceback


def test_a_failing_approver_keeps_its_traceback():
    tb = Toolbox()

    @tb.register(risk="high")
    def risky() -> str:
        """Risky."""
        return "done"

    def approver(request):
        raise LookupError("no such user")

    r = tb.execute(ToolCall("risky"), approval=approver)
    assert r.is_error and "was not run" in r.content
    assert r.traceback is not None and r.traceback.rstrip().endswith("LookupError: no such user")
    assert "in approver" in r.traceback


def test_a_huge_traceback_is_capped_to_its_head_and_tail():
    tb = Toolbox()

    @tb.register
    def huge() -> str:
        """Fails with a message of 50,000 characters."""
        raise RuntimeError("start " + "x" * 50_000 + " end")

    r = tb.execute(ToolCall("huge"))
    assert r.traceback is not None
    assert len(r.traceback) <= 20_200
    # The head says where it failed, the tail how it ended.
    assert r.traceback.startswith("Traceback (most recent call last):")
    assert "in huge" in r.traceback[:4_000]
    assert r.traceback.rstrip().endswith("x end")
    assert "chars of traceback left out" in r.traceback


def test_an_exception_whose_traceback_cannot_be_formatted_still_gives_a_result():
    class Broken(Exception):
        def __str__(self) -> str:
            raise SystemExit(3)

    tb = Toolbox()

    @tb.register
    def broken() -> str:
        """Raises an exception that cannot be shown."""
        raise Broken

    r = tb.execute(ToolCall("broken"))
    assert r.is_error and r.traceback is not None and "Broken" in r.traceback
