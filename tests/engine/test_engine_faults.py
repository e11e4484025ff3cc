# SPDX-License-Identifier: Apache-2.0
"""The engine never stops answering: faults injected into the model and into the worker.

A model whose forward raises (``RuntimeError``, ``SystemExit``) on one row after
that row's first tokens, NaN logits on one row, a step that hangs, a worker
thread that dies: every request resolves, the rows that were fine are
untouched (the same text as alone), and the engine keeps serving (or, once its
worker died, says so on every call). Requests that never ran are counted apart
in the metrics.
"""

from __future__ import annotations

import threading
import time

import pytest

from mp13_engine import (
    ConfigError,
    Engine,
    EngineClosedError,
    EngineConfig,
    FinishReason,
    Request,
    RequestError,
)

GOOD = ["one two", "three", "four five six"]
NEW = 12


def _good() -> list[Request]:
    return [Request(prompt=p, max_new_tokens=NEW, min_new_tokens=NEW) for p in GOOD]


def _last_positions(kwargs):
    """The position of each row's last input token, as the model sees it whoever calls it
    (the engine's step loop or ``generate``)."""
    return kwargs["position_ids"][:, -1]


class _RaisesAt:
    """A forward pre-hook: raises ``exc`` in every forward where some row is at ``position``."""

    def __init__(self, position, exc):
        self.position, self.exc, self.raised = position, exc, 0

    def __call__(self, module, args, kwargs):
        if (_last_positions(kwargs) == self.position).any():
            self.raised += 1
            raise self.exc("injected fault")


class _NanAt:
    """A forward hook: NaN logits for the rows whose last input token is at ``position``."""

    def __init__(self, position):
        self.position = position

    def __call__(self, module, args, kwargs, out):
        rows = _last_positions(kwargs) == self.position
        out.logits[rows.to(out.logits.device)] = float("nan")
        return out


class _Hangs:
    """A forward pre-hook that blocks until ``release`` is set (``stuck``: it blocks now)."""

    def __init__(self):
        self.stuck, self.release = threading.Event(), threading.Event()

    def __call__(self, module, args, kwargs):
        self.stuck.set()
        self.release.wait(30)


def _install(engine, hook, *, after: bool = False):
    """Register ``hook`` on the engine's model, between two steps."""
    model = engine.model
    if after:
        return engine._run_on_worker(model.register_forward_hook, hook, with_kwargs=True)
    return engine._run_on_worker(model.register_forward_pre_hook, hook, with_kwargs=True)


@pytest.fixture
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0) as eng:
        yield eng


def _bad_row(engine) -> tuple[Request, int]:
    """A request whose prompt is longer than any good row will ever get, and the position at
    which it feeds its third generated token (only that row ever computes it)."""
    bad = Request(prompt="a long and winding prompt " * 8, max_new_tokens=NEW)
    n = engine.count_tokens(engine.format_prompt(bad))
    longest_good = max(engine.count_tokens(engine.format_prompt(r)) for r in _good()) + NEW
    assert n > longest_good
    return bad, n + 2


@pytest.mark.parametrize("exc", [RuntimeError, SystemExit], ids=["RuntimeError", "SystemExit"])
def test_a_fault_after_the_first_tokens_fails_only_the_faulty_row(engine, exc):
    expected = [r.raw_text for r in engine.generate_many(_good())]
    bad, position = _bad_row(engine)
    faulty = _RaisesAt(position, exc)
    _install(engine, faulty)
    futures = [engine.submit(r) for r in [bad, *_good()]]
    out = [f.result(timeout=60) for f in futures]
    assert out[0].finish_reason is FinishReason.ERROR
    assert "injected fault" in out[0].error and exc.__name__ in out[0].error
    assert out[0].metrics.completion_tokens == 3  # its first tokens are kept
    assert [o.raw_text for o in out[1:]] == expected
    assert all(o.finish_reason is FinishReason.LENGTH for o in out[1:])
    assert faulty.raised == 2  # the batch step, then the row alone
    assert engine.generate(Request(prompt="still serving", max_new_tokens=3)).ok


@pytest.mark.parametrize("exc", [RuntimeError, SystemExit], ids=["RuntimeError", "SystemExit"])
def test_a_fault_while_prompts_are_computed_fails_only_the_faulty_row(engine, exc):
    expected = [r.raw_text for r in engine.generate_many(_good())]
    bad, _ = _bad_row(engine)
    # A position only the bad row's prompt reaches: the batched prefill raises, then the
    # bad row alone.
    _install(engine, _RaisesAt(engine.count_tokens(bad.prompt) - 1, exc))
    out = [f.result(timeout=60) for f in [engine.submit(r) for r in [bad, *_good()]]]
    assert out[0].finish_reason is FinishReason.ERROR and "injected fault" in out[0].error
    assert out[0].metrics.completion_tokens == 0
    assert [o.raw_text for o in out[1:]] == expected


def test_a_row_that_alone_runs_out_of_memory_ends_saying_what_to_change(engine):
    import torch

    # The engine has no KV budget of its own: memory is max_batch_size rows as long as the
    # longest. A step out of memory is retried row by row; a row too big alone ends ERROR
    # with what to change, and the rows that fit go on untouched.
    expected = [r.raw_text for r in engine.generate_many(_good())]
    bad, position = _bad_row(engine)
    _install(engine, _RaisesAt(position, torch.OutOfMemoryError))
    out = [f.result(timeout=60) for f in [engine.submit(r) for r in [bad, *_good()]]]
    assert out[0].finish_reason is FinishReason.ERROR
    assert out[0].error.startswith("out of memory while generating (OutOfMemoryError:")
    assert "a smaller max_batch_size or prefill_chunk_tokens" in out[0].error
    assert [o.raw_text for o in out[1:]] == expected
    assert engine.generate(Request(prompt="still serving", max_new_tokens=3)).ok


def test_nan_logits_end_that_row_with_an_error_and_leave_the_others(engine):
    expected = [r.raw_text for r in engine.generate_many(_good())]
    bad, position = _bad_row(engine)
    _install(engine, _NanAt(position), after=True)
    out = [f.result(timeout=60) for f in [engine.submit(r) for r in [bad, *_good()]]]
    assert out[0].finish_reason is FinishReason.ERROR
    assert "NaN" in out[0].error and "token 4" in out[0].error
    assert out[0].metrics.completion_tokens == 3
    assert [o.raw_text for o in out[1:]] == expected
    assert all(o.finish_reason is FinishReason.LENGTH for o in out[1:])


def test_a_hung_step_times_out_its_requests_and_is_reported(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", slow_step_s=0.3) as engine:
        assert engine.generate(Request(prompt="warm up", max_new_tokens=2)).ok
        hangs = _Hangs()
        handle = _install(engine, hangs)
        started = time.perf_counter()
        running = engine.submit(Request(prompt="stuck", max_new_tokens=50, timeout_s=0.5))
        assert hangs.stuck.wait(30)
        queued = engine.submit(Request(prompt="behind it", max_new_tokens=5, timeout_s=0.8))
        first, second = running.result(timeout=10), queued.result(timeout=10)
        took = time.perf_counter() - started
        for resp, limit in ((first, "0.5"), (second, "0.8")):
            assert resp.finish_reason is FinishReason.ERROR
            assert f"timed out after {limit} s" in resp.error and "timeout_s" in resp.error
        assert took < 5  # answered at the deadline, while the worker is still stuck
        assert not hangs.release.is_set()
        deadline = time.monotonic() + 10
        while engine.metrics().slow_steps == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.metrics().slow_steps == 1  # visible while it hangs, counted once
        hangs.release.set()
        handle.remove()
        after = engine.generate(Request(prompt="after the hang", max_new_tokens=3))
        assert after.ok
        assert engine.metrics().slow_steps == 1


def test_the_engine_default_deadline_applies_when_a_request_sets_none(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", request_timeout_s=0.4) as engine:
        hangs = _Hangs()
        handle = _install(engine, hangs)
        try:
            resp = engine.submit(Request(prompt="stuck", max_new_tokens=5)).result(timeout=10)
        finally:
            hangs.release.set()
        handle.remove()
        assert resp.finish_reason is FinishReason.ERROR
        assert "timed out after 0.4 s" in resp.error
        assert engine.generate(Request(prompt="quick", max_new_tokens=2, timeout_s=30)).ok


def test_close_answers_every_request_while_the_worker_is_stuck(tiny_model_path):
    engine = Engine.load(str(tiny_model_path), device="cpu")
    hangs = _Hangs()
    _install(engine, hangs)
    running = engine.submit(Request(prompt="stuck", max_new_tokens=50))
    assert hangs.stuck.wait(30)
    queued = [engine.submit(Request(prompt=f"q{i}", max_new_tokens=5)) for i in range(3)]
    engine.close(timeout=0.2)
    try:
        for fut in [running, *queued]:
            assert fut.result(timeout=0).finish_reason is FinishReason.CANCELLED
        assert engine.model is not None  # the stuck step still uses it
    finally:
        hangs.release.set()
    # Was: kept for as long as the engine object lived, as close() had returned before
    # the step ended; the worker now lets go of the model as it stops.
    deadline = time.monotonic() + 30
    while engine.model is not None or engine.metrics().prefix_cache.bytes:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_if_the_worker_dies_every_pending_request_fails_and_later_calls_say_so(
    tiny_model_path,
):
    engine = Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1)
    long = Request(prompt="long", max_new_tokens=500, min_new_tokens=500)
    running = engine.submit(long)
    deadline = time.monotonic() + 30
    while not engine._inflight[long.id].tokens:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    queued = engine.submit(Request(prompt="waiting", max_new_tokens=5))

    def broken(*args, **kwargs):  # a bug in the worker's own machinery
        raise SystemExit("worker bug")

    engine._worker._sched.next_work = broken
    for fut in (running, queued):
        resp = fut.result(timeout=30)
        assert resp.finish_reason is FinishReason.ERROR
        assert "worker thread stopped" in resp.error and "SystemExit" in resp.error
    assert engine.closed
    with pytest.raises(EngineClosedError, match="worker thread stopped"):
        engine.generate("anyone there?")
    with pytest.raises(EngineClosedError, match="worker thread stopped"):
        engine._run_on_worker(lambda: None)
    engine.close()


def test_requests_that_never_ran_are_counted_apart(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        ran = [engine.generate(Request(prompt=f"ran {i}", max_new_tokens=4)) for i in range(3)]
        too_long = "word " * (engine.model.config.max_position_embeddings + 10)
        refused = [
            engine.generate(Request(prompt="bad", adapters=["missing"])),
            engine.generate(Request(prompt=too_long, max_new_tokens=2)),
        ]
        assert all(not r.ok and r.metrics.batch_size == 0 for r in refused)
        m = engine.metrics()
    assert m.total_requests == 5 and m.rejected == 2
    assert m.requests == 3
    assert m.completion_tokens == sum(r.metrics.completion_tokens for r in ran)
    assert m.prompt_tokens == sum(r.metrics.prompt_tokens for r in ran)
    assert m.finish_reasons["error"] == 0
    assert m.latency_p50_s >= min(r.metrics.total_s for r in ran)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prefill_chunk_tokens", 0),
        ("prefix_cache_mb", -1),
        ("request_timeout_s", 0),
        ("request_timeout_s", "soon"),
        ("slow_step_s", -2.0),
    ],
)
def test_new_config_fields_are_validated(field, value):
    with pytest.raises(ConfigError, match=field):
        EngineConfig(model="m", **{field: value})


@pytest.mark.parametrize("value", [0, -1.0, "soon"])
def test_a_bad_timeout_is_refused_by_name(value):
    with pytest.raises(RequestError, match="timeout_s"):
        Request(prompt="hi", timeout_s=value)


def test_decode_steps_run_in_eval_mode_even_if_a_job_leaves_train_mode(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0) as engine:
        expected = engine.generate(Request(prompt="dropout?", max_new_tokens=8)).raw_text
        modes = []
        _install(engine, lambda module, args, kwargs: modes.append(module.training))
        engine._run_on_worker(lambda: engine.model.train())  # what a training step may leave
        got = engine.generate(Request(prompt="dropout?", max_new_tokens=8))
        assert got.raw_text == expected
        assert modes and not any(modes)
        assert engine._run_on_worker(lambda: engine.model.training)  # restored afterwards


def test_a_bug_in_the_decode_loop_fails_its_rows_and_the_engine_serves_on(engine):
    loop = engine._worker._loop
    real_step, real_changed = loop.step, loop.weights_changed
    long = Request(prompt="long", max_new_tokens=500, min_new_tokens=500)

    def step_once(admitted):
        if engine._inflight.get(long.id) is not None and engine._inflight[long.id].tokens:
            loop.step = real_step
            raise RuntimeError("loop bug")
        return real_step(admitted)

    loop.step = step_once
    failed = engine.generate(long)
    assert failed.finish_reason is FinishReason.ERROR
    assert failed.error == (
        "the engine's step failed (RuntimeError: loop bug); send the request again"
    )
    assert engine.generate(Request(prompt="one two", max_new_tokens=3)).ok

    def changed_once(change):
        loop.weights_changed = real_changed
        raise RuntimeError("check bug")

    running = engine.submit(Request(prompt="again", max_new_tokens=500, min_new_tokens=500))
    deadline = time.monotonic() + 30
    while not any(st.tokens for st in list(engine._inflight.values())):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    loop.weights_changed = changed_once
    engine._run_on_worker(lambda: None)  # any call between steps runs the check
    resp = running.result(timeout=30)
    assert resp.finish_reason is FinishReason.ERROR
    assert "could not check this request's adapter after a change; send it again" in resp.error
    assert engine.generate(Request(prompt="three", max_new_tokens=3)).ok


def test_steps_slower_than_slow_step_s_are_counted_and_logged(tiny_model_path, caplog):
    with Engine.load(str(tiny_model_path), device="cpu", slow_step_s=1e-9) as engine:
        with caplog.at_level("WARNING", logger="mp13_engine"):
            assert engine.generate(Request(prompt="one two", max_new_tokens=4)).ok
        slow = engine.metrics().slow_steps
    assert slow >= 1  # every step is slow against a nanosecond
    assert "slow above 0.00 s" in caplog.text


def test_finished_requests_do_not_pile_up_in_the_deadline_watch(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", request_timeout_s=60.0) as engine:
        done = engine.generate_many([Request(prompt=f"r{i}", max_new_tokens=1) for i in range(130)])
        assert all(r.ok for r in done)
        watch = engine._worker._watchdog
        assert len(watch._live) == 0 and len(watch._heap) <= 64  # stale entries were dropped


def test_a_step_that_fails_before_its_requests_join_the_loop_still_answers_them(engine):
    loop = engine._worker._loop
    real_step = loop.step

    def fails_on_admission(admitted):
        if admitted:
            raise RuntimeError("admission bug")
        return real_step(admitted)

    loop.step = fails_on_admission
    try:
        futures = [engine.submit(r) for r in _good()]
        answers = [f.result(timeout=30) for f in futures]  # used to wait forever
    finally:
        loop.step = real_step
    assert {a.finish_reason for a in answers} == {FinishReason.ERROR}
    assert {a.error for a in answers} == {
        "the engine's step failed (RuntimeError: admission bug); send the request again"
    }
    assert engine.generate(Request(prompt="one two", max_new_tokens=3)).ok


def test_closing_while_a_step_that_failed_on_admission_ran_answers_its_requests(tiny_model_path):
    engine = Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0)
    loop = engine._worker._loop
    entered, release = threading.Event(), threading.Event()

    def stuck_on_admission(admitted):
        entered.set()
        release.wait(30)  # close() comes in here; the admitted request never joins the loop
        return 0

    loop.step = stuck_on_admission
    future = engine.submit(Request(prompt="one two", max_new_tokens=3))
    assert entered.wait(30)
    closer = threading.Thread(target=engine.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not engine.closed:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release.set()
    closer.join(30)
    assert future.result(timeout=30).finish_reason is FinishReason.CANCELLED


def test_an_engine_dropped_with_a_request_in_flight_answers_it(tiny_model_path):
    import gc

    future = Engine.load(str(tiny_model_path), device="cpu").submit(
        Request(prompt="one two", max_new_tokens=50, min_new_tokens=50)
    )
    gc.collect()
    # The future alone does not keep the engine: its request ends, saying why when it
    # failed, instead of waiting forever.
    resp = future.result(timeout=30)
    assert resp.finish_reason in (FinishReason.CANCELLED, FinishReason.ERROR, FinishReason.LENGTH)
    if resp.finish_reason is FinishReason.ERROR:
        assert "keep a reference to the engine" in resp.error
