# SPDX-License-Identifier: Apache-2.0
"""The step clock: each kind of work is judged by its own usual time, and what it logs says
what ran, how long, and what is usual for it; a hung step is still reported while it hangs."""

from __future__ import annotations

import functools
import logging
import threading

import pytest

from mp13_engine import Engine, Request
from mp13_engine._watchdog import StepClock, work_name


class _FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run(clock: StepClock, now: _FakeTime, kind: str, took: float) -> None:
    clock.begin(kind)
    now.t += took
    clock.end()


def _clock() -> tuple[StepClock, _FakeTime]:
    now = _FakeTime()
    return StepClock(now=now), now


def test_a_slow_call_is_not_judged_by_a_fast_call_of_another_kind(caplog):
    # What a user saw: a quick call made "call" look like milliseconds, so setting up a
    # training adapter (2.2 s on a busy machine) was reported as a model call that "may be
    # stuck". Each call is its own kind now; its first run is allowed 30 s.
    clock, now = _clock()
    for _ in range(20):
        _run(clock, now, "call TrainingJob._prepare.<locals>.<lambda>", 0.001)
    with caplog.at_level(logging.WARNING, logger="mp13_engine"):
        clock.begin("call TrainingJob._setup_on_worker")
        now.t += 2.21
        clock.check()  # the watchdog looks while it runs
        clock.end()
    assert clock.slow_steps == 0
    assert caplog.text == ""
    assert clock.typical("call TrainingJob._setup_on_worker") == pytest.approx(2.21)
    assert clock.typical("call TrainingJob._prepare.<locals>.<lambda>") == pytest.approx(0.001)


def test_a_kind_that_usually_takes_seconds_is_allowed_25_times_that():
    clock, now = _clock()
    _run(clock, now, "TrainingJob step", 1.5)
    assert clock.threshold("TrainingJob step") == pytest.approx(37.5)
    _run(clock, now, "TrainingJob step", 20.0)  # within 25 x its usual time
    assert clock.slow_steps == 0
    assert clock.threshold("never ran") == 30.0
    for _ in range(50):
        _run(clock, now, "decode step", 0.01)
    assert clock.threshold("decode step") == 2.0  # the floor, whatever the average


def test_a_hung_step_is_reported_once_while_it_hangs_saying_what_is_usual(caplog):
    clock, now = _clock()
    for _ in range(10):
        _run(clock, now, "decode step", 0.02)
    with caplog.at_level(logging.WARNING, logger="mp13_engine"):
        clock.begin("decode step")
        now.t += 1.0
        clock.check()
        assert clock.slow_steps == 0 and caplog.text == ""
        now.t += 2.5
        clock.check()
        now.t += 10.0
        clock.check()  # still hanging: counted and logged once
        clock.end()
    assert clock.slow_steps == 1
    [record] = caplog.records
    message = record.getMessage()
    assert "decode step has been running for 3.50 s" in message
    assert "typically 0.02 s over 10 runs, slow above 2.00 s" in message
    assert "timeout_s" in message
    assert "stuck" not in message  # it says what it knows, not what it fears


def test_a_slow_step_seen_only_when_it_ends_is_logged_then(caplog):
    clock, now = _clock()
    with caplog.at_level(logging.WARNING, logger="mp13_engine"):
        _run(clock, now, "call AdapterManager._load_on_worker", 31.0)
    assert clock.slow_steps == 1
    message = caplog.records[0].getMessage()
    assert "call AdapterManager._load_on_worker took 31.00 s" in message
    assert "its first run, slow above 30.00 s" in message
    assert "requests waited meanwhile" in message


def test_a_configured_threshold_applies_to_every_kind_and_says_where_it_comes_from(caplog):
    now = _FakeTime()
    clock = StepClock(0.5, now=now)
    with caplog.at_level(logging.WARNING, logger="mp13_engine"):
        _run(clock, now, "decode step", 0.4)
        _run(clock, now, "call f", 0.6)
    assert clock.slow_steps == 1
    assert clock.threshold("anything") == 0.5
    assert "slow above 0.50 s, EngineConfig.slow_step_s" in caplog.text


class _Named:
    def method(self) -> None:
        """A method."""


def test_calls_are_named_by_what_they_run():
    assert work_name(_Named().method) == "_Named.method"
    assert work_name(functools.partial(_Named.method, _Named())) == "_Named.method"

    @functools.wraps(_Named.method)
    def wrapper() -> None:
        """A wrapper."""

    assert work_name(wrapper) == "_Named.method"
    assert work_name(len) == "len"


def test_the_engine_times_each_worker_call_and_decode_kind_apart(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        release = threading.Event()

        def slowish() -> int:
            release.wait(0.05)
            return 1

        assert engine._run_on_worker(lambda: 2) == 2
        assert engine._run_on_worker(slowish) == 1
        assert engine.generate(Request(prompt="one two", max_new_tokens=4)).ok
        clock = engine._worker.clock
        fast = clock.typical(f"call {work_name(lambda: 2)}")
        slow = clock.typical(f"call {slowish.__qualname__}")
        assert fast is not None and slow is not None and slow > fast
        assert clock.typical("prefill step") is not None
        assert clock.typical("decode step") is not None
        assert engine.metrics().slow_steps == 0


def test_adapter_calls_are_timed_under_their_own_names(tiny_model_path, adapter_dir):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        engine.adapters.unload("a")
        clock = engine._worker.clock
        assert clock.typical("call AdapterManager._load_on_worker") is not None
        assert clock.typical("call AdapterManager._unload_on_worker") is not None
