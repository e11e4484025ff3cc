# SPDX-License-Identifier: MIT
"""The sync calls (``run_sync``) from several threads on one session and one engine.

Each thread's ``ask`` runs on a loop of its own; the session's store serializes the SQL.
A thread with its own cursor gets its own replies in its own branch; a cursor already
running an exchange refuses a second one from another thread with ``CursorError``.
"""

from __future__ import annotations

import threading
import time

import pytest

from mp13_context import ChatContext, CursorError, Session, Turn
from mp13_context._sync import run_sync

testing = pytest.importorskip("mp13_engine.testing")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from mp13_engine import Engine

    path = testing.build_tiny_model(tmp_path_factory.mktemp("tiny"), family="chatml", seed=0)
    with Engine.load(str(path), device="cpu", default_max_new_tokens=6) as eng:
        yield eng


def _questions(i: int) -> list[str]:
    return [f"thread {i} question {k}" for k in range(3)]


def _run_threads(target, n: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"


@pytest.mark.parametrize("where", [":memory:", "file"])
def test_threads_each_with_a_cursor_get_their_own_replies(engine, tmp_path, where):
    session = Session.open(":memory:" if where == ":memory:" else str(tmp_path / "s.db"))
    ctx = ChatContext(session, engine=engine)
    alone = {}
    for i in range(4):
        cur = ctx.cursor()
        alone[i] = [cur.ask(q).text for q in _questions(i)]
    results: dict[int, tuple[object, list[str]]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(i: int) -> None:
        try:
            start.wait()
            cur = ctx.cursor()
            results[i] = (cur, [cur.ask(q).text for q in _questions(i)])
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    _run_threads(worker, 4)
    assert failures == []
    for i, (cur, texts) in results.items():
        assert texts == alone[i]  # greedy: the same replies as asked one thread at a time
        users = [m["content"] for m in cur.messages() if m["role"] == "user"]
        assert users == _questions(i)  # nothing of another thread's conversation
    assert len(session.conversations()) == 8
    session.close()


def test_a_cursor_running_in_one_thread_refuses_another_thread(engine):
    session = Session.open(":memory:")
    cur = ChatContext(session, engine=engine).cursor()
    running, proceed = threading.Event(), threading.Event()
    outcome: list[object] = []

    def hold(event: object) -> None:  # runs on the first thread's own loop
        running.set()
        proceed.wait(timeout=60)

    def first(_: int) -> None:
        try:
            outcome.append(cur.ask("first", on_event=hold))
        except BaseException as exc:  # reported below, in the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=first, args=(0,))
    thread.start()
    try:
        assert running.wait(timeout=60)
        assert cur.running
        with pytest.raises(CursorError, match="running an exchange"):
            cur.ask("second")
    finally:
        proceed.set()
        thread.join(timeout=60)
    assert not thread.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], Turn), outcome  # the first ask ended normally
    users = [m["content"] for m in cur.messages() if m["role"] == "user"]
    assert users == ["first"]  # the refused call recorded nothing
    session.close()


def test_run_sync_returns_and_raises_in_the_calling_thread():
    async def value() -> str:
        return threading.current_thread().name

    async def fails() -> None:
        raise CursorError("from the coroutine")

    assert run_sync(value()) == threading.current_thread().name  # no loop: runs right here

    async def inside_a_loop() -> tuple[str, str]:
        return run_sync(value()), threading.current_thread().name

    helper, caller = run_sync(inside_a_loop())
    assert helper == "mp13-context-sync" and caller != helper
    with pytest.raises(CursorError, match="from the coroutine"):
        run_sync(fails())


def test_two_threads_asking_on_one_cursor_at_once_run_one_exchange(engine, monkeypatch):
    # Both threads pass the first idle check before either marks the cursor busy (the
    # pause in building the exchange makes that certain): exactly one may run.
    from mp13_context import _cursor

    class SlowToBuild(_cursor.Exchange):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            time.sleep(0.05)

    monkeypatch.setattr(_cursor, "Exchange", SlowToBuild)
    session = Session.open(":memory:")
    cur = ChatContext(session, engine=engine).cursor()
    start = threading.Barrier(2)
    outcome: dict[int, object] = {}

    def worker(i: int) -> None:
        start.wait()
        try:
            outcome[i] = cur.ask(f"question {i}")
        except BaseException as exc:  # reported below, in the test's thread
            outcome[i] = exc

    _run_threads(worker, 2)
    kinds = sorted(type(o).__name__ for o in outcome.values())
    assert kinds == ["CursorError", "Turn"], outcome
    refused = next(o for o in outcome.values() if isinstance(o, CursorError))
    assert "running an exchange" in str(refused)
    users = [m["content"] for m in cur.messages() if m["role"] == "user"]
    assert len(users) == 1  # one turn recorded, no sibling branch from the refused call
    assert len(session.conversations()) == 1
    session.close()
