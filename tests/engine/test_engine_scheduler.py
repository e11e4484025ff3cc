# SPDX-License-Identifier: Apache-2.0
"""Scheduler: decode steps, round-robin fairness across groups, jobs, worker calls, close."""

from __future__ import annotations

import threading
import time

import pytest

from mp13_engine import EngineClosedError, FinishReason, Request
from mp13_engine._engine import Engine
from mp13_engine._scheduler import Call, Decode, JobStep, Scheduler
from mp13_engine._streams import RequestState


class FakeJob:
    def __init__(self, key, steps, log, delay=0.0):
        self.group_key = key
        self.left = steps
        self.log = log
        self.delay = delay
        self.failed = None

    def step(self):
        if self.delay:
            time.sleep(self.delay)
        self.log.append(self.group_key)
        self.left -= 1
        return self.left > 0

    def fail(self, exc):
        self.failed = exc


def _state(i: int) -> RequestState:
    return RequestState(Request(prompt=f"p{i}"), f"p{i}", [1])


def test_decode_steps_admit_up_to_the_free_rows_in_fifo_order():
    s = Scheduler(max_batch_size=3, batch_wait_s=0)
    states = [_state(i) for i in range(7)]
    for x in states:
        s.add_request(x)
    sizes = []
    order = []
    for free in (3, 1, 0, 3, 5):
        w = s.next_work(decoding=True, free=free)
        assert isinstance(w, Decode)
        sizes.append(len(w.admitted))
        order.extend(w.admitted)
    assert sizes == [3, 1, 0, 3, 0]
    assert order == states
    assert s.queued == 0
    assert s.next_work(decoding=False, free=3) is None  # nothing queued, loop idle
    assert isinstance(s.next_work(decoding=True, free=3), Decode)  # rows still decoding


def test_round_robin_no_group_starves():
    s = Scheduler(max_batch_size=2, batch_wait_s=0)
    log: list = []
    a, b = FakeJob("A", 100, log), FakeJob("B", 100, log)
    s.add_job(a)
    for i in range(6):
        s.add_request(_state(i))
    s.add_job(b)
    turns = []
    for _ in range(9):
        w = s.next_work(decoding=True, free=2)
        turns.append("decode" if isinstance(w, Decode) else w.job.group_key)
    # every group gets a turn in each round: inference, A, B, inference, A, B, ...
    assert turns[:6] == ["decode", "A", "B", "decode", "A", "B"]
    assert turns.count("decode") == 3


def test_calls_run_before_other_work_and_queued_cancel_removes():
    s = Scheduler(max_batch_size=4, batch_wait_s=0)
    x = _state(0)
    s.add_request(x)
    s.add_call(Call(print, (), {}, None))
    assert isinstance(s.next_work(), Call)
    assert s.remove_request(x) is True
    assert s.remove_request(x) is False
    assert s.next_work() is None


def test_collect_wait_only_for_a_fresh_partial_first_step():
    s = Scheduler(max_batch_size=2, batch_wait_s=0.05)
    x = _state(0)
    s.add_request(x)
    now = time.perf_counter()
    assert 0 < s.collect_wait(now=now) <= 0.05
    assert s.collect_wait(now=now + 1) == 0
    assert s.collect_wait(decoding=True, now=now) == 0  # a busy loop admits at its next step
    s.add_request(_state(1))
    assert s.collect_wait(now=now) == 0  # a full batch: go now
    s3 = Scheduler(max_batch_size=8, batch_wait_s=0.05)
    first = _state(0)
    s3.add_request(first)
    s3.add_request(_state(1))  # a later arrival restarts the window ...
    later = time.perf_counter()
    assert s3.collect_wait(now=later + 0.04) > 0
    # ... but never past max_wait_s (5 x batch_wait_s) after the oldest submission
    assert s3.collect_wait(now=first.submit_t + 0.26) == 0
    # requests still being prepared by API threads hold the first step, up to the cap
    s4 = Scheduler(max_batch_size=8, batch_wait_s=0.01)
    y = _state(0)
    s4.add_request(y)
    s4.preparing = 1
    assert s4.collect_wait(now=y.submit_t + 0.03) > 0
    assert s4.collect_wait(now=y.submit_t + 0.06) == 0
    s4.preparing = 0
    assert s4.collect_wait(now=y.submit_t + 0.03) == 0
    s2 = Scheduler(max_batch_size=2, batch_wait_s=0.05)
    s2.add_job(FakeJob("J", 1, []))
    assert s2.collect_wait() == 0
    assert isinstance(s2.next_work(), JobStep)


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=4) as eng:
        yield eng


def test_requests_are_served_while_a_job_runs(engine):
    log: list = []
    job = FakeJob(("train", "x"), 400, log, delay=0.002)
    engine._submit_job(job)
    time.sleep(0.01)
    r = engine.generate(Request(prompt="during job", max_new_tokens=3))
    steps_when_served = len(log)
    assert r.ok
    assert steps_when_served < 400, "the request waited for the whole job"
    while job.left > 0:
        time.sleep(0.01)
    assert job.failed is None


def test_two_jobs_interleave_and_failures_are_reported(engine):
    log: list = []
    a, b = FakeJob("ja", 5, log), FakeJob("jb", 5, log)

    class Boom(FakeJob):
        def step(self):
            raise ValueError("bad step")

    class Last(FakeJob):
        def step(self):
            done.set()
            return False

    boom = Boom("jc", 5, log)
    done = threading.Event()

    def submit_all():  # on the worker, so all three are queued before any step runs
        for job in (a, b, boom, Last("end", 1, log)):
            engine._submit_job(job)

    engine._run_on_worker(submit_all)
    assert done.wait(10)
    assert log[:4] == ["ja", "jb", "ja", "jb"]
    assert isinstance(boom.failed, ValueError)
    assert engine.generate(Request(prompt="ok", max_new_tokens=2)).ok


def test_run_on_worker_runs_on_the_worker_and_reraises(engine):
    name = engine._run_on_worker(lambda: threading.current_thread().name)
    assert name.startswith("mp13-engine")
    with pytest.raises(ZeroDivisionError):
        engine._run_on_worker(lambda: 1 / 0)


def test_close_cancels_queued_and_running_and_fails_jobs(tiny_model_path):
    eng = Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1)
    running = eng.submit(Request(prompt="long", max_new_tokens=1500, min_new_tokens=1500))
    queued = eng.submit(Request(prompt="queued", max_new_tokens=5))
    job = FakeJob("late", 1000, [], delay=0.001)
    eng._submit_job(job)
    time.sleep(0.05)
    eng.close()
    assert running.result(5).finish_reason is FinishReason.CANCELLED
    assert queued.result(5).finish_reason is FinishReason.CANCELLED
    assert isinstance(job.failed, EngineClosedError)
    with pytest.raises(EngineClosedError):
        eng.generate("after close")
    with pytest.raises(EngineClosedError):
        eng._run_on_worker(lambda: None)


def test_a_slow_job_shares_the_worker_by_time_and_neither_starves(engine):
    """Training steps are long, decode steps short: the request decodes several tokens per
    job step (strict turns would give one), and the job still steps while it decodes."""
    request = Request(prompt="decode beside a job", max_new_tokens=60, min_new_tokens=60)
    seen: list[int] = []

    class Watching(FakeJob):
        def step(self):
            st = engine._inflight.get(request.id)
            seen.append(len(st.tokens) if st is not None else -1)
            return super().step()

    job = Watching("watch", 10_000, [], delay=0.04)
    engine._submit_job(job)
    resp = engine.generate(request)
    assert engine._cancel_job(job) is True
    assert engine._cancel_job(job) is False  # no longer queued
    assert resp.metrics.completion_tokens == 60
    during = [n for n in seen if 0 < n < 60]
    assert during, "the job starved while the request decoded"
    assert len(during) <= 30  # at least two tokens per job step on average


def test_turns_are_shared_by_worker_time():
    s = Scheduler(max_batch_size=2, batch_wait_s=0)
    slow = FakeJob("slow", 100, [])
    s.add_job(slow)
    turns = []
    for _ in range(40):
        w = s.next_work(decoding=True, free=2)
        is_job = isinstance(w, JobStep)
        turns.append("job" if is_job else "decode")
        s.charge(0.1 if is_job else 0.002)  # a 100 ms training step, 2 ms decode steps
    assert turns.count("job") == 1  # decode catches up on the job's 100 ms first
    assert turns.count("decode") == 39
    s.add_job(FakeJob("cheap", 100, []))  # a newly busy group starts level, not ahead
    follow = []
    for _ in range(6):
        w = s.next_work(decoding=True, free=2)
        follow.append(w.job.group_key if isinstance(w, JobStep) else "decode")
        s.charge(0.002)
    assert "decode" in follow and "cheap" in follow and "slow" not in follow


def test_a_job_step_calls_the_engine_inline_and_a_failing_fail_is_contained(engine):
    """Inside a job step (the worker thread): engine calls run inline, their errors reach the
    step; waiting for a request there would hang, so generate refuses. A job whose fail()
    itself raises is logged, and the engine serves on."""
    from mp13_engine import EngineError

    seen: dict[str, object] = {}
    done = threading.Event()

    def boom():
        raise ValueError("boom")

    class Calling(FakeJob):
        def step(self):
            seen["thread"] = engine._run_on_worker(lambda: threading.current_thread())
            try:
                engine._run_on_worker(boom)
            except ValueError as exc:
                seen["error"] = str(exc)
            try:
                engine.generate("from inside a step")
            except EngineError as exc:
                seen["generate"] = str(exc)
            done.set()
            return False

    engine._submit_job(Calling("calling", 1, []))
    assert done.wait(30)
    assert seen["thread"] is engine._worker._thread
    assert seen["error"] == "boom"
    assert "called on the engine's worker thread" in seen["generate"]

    failed = threading.Event()

    class FailsTwice(FakeJob):
        def step(self):
            raise RuntimeError("step bug")

        def fail(self, exc):
            failed.set()
            raise RuntimeError("fail bug")

    engine._submit_job(FailsTwice("twice", 1, []))
    assert failed.wait(30)
    assert engine.generate(Request(prompt="still here", max_new_tokens=2)).ok
