# SPDX-License-Identifier: Apache-2.0
"""The worker thread: the only thread that touches the model.

It loops: wait for work, let the ``Scheduler`` pick the next unit (a call, a
wave or a job step), run it outside the lock, repeat. Public API threads hand
it work through ``submit_requests`` / ``submit_job`` / ``call`` and get results
back through futures. ``close`` drains the queues: queued requests resolve
``CANCELLED``, running rows are cancelled at their next step (and resolved by
``close`` itself if the worker does not get there before ``timeout``), pending
calls raise ``EngineClosedError``, and once the current wave or job step has
ended every unfinished job gets ``fail(EngineClosedError)`` (never racing its
step).

Cancelling a request: a queued one is taken out of the queue and resolved by
the canceller; any other is marked (``RequestState.cancel``) and resolved by
the worker at its next step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from mp13_engine._errors import EngineClosedError
from mp13_engine._scheduler import Call, Job, JobStep, Scheduler, Wave
from mp13_engine._streams import RequestState
from mp13_engine._types import FinishReason

_log = logging.getLogger(__name__)


class Worker:
    def __init__(
        self,
        scheduler: Scheduler,
        run_wave: Callable[[list[RequestState]], None],
        name: str,
    ):
        self._sched = scheduler
        self._run_wave = run_wave
        self._cond = threading.Condition()
        self._closed = False
        self._running: list[RequestState] = []
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ----- any thread
    @property
    def closed(self) -> bool:
        return self._closed

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def preparing(self, delta: int) -> None:
        """API threads announce requests they are preparing (+n) and drop them (-n)."""
        with self._cond:
            self._sched.preparing += delta
            if delta < 0:
                self._cond.notify()

    def submit_requests(self, states: list[RequestState]) -> None:
        with self._cond:
            if self._closed:
                raise EngineClosedError(
                    "the engine is closed; create a new one with Engine.load(...)"
                )
            for st in states:
                self._sched.add_request(st)
            self._cond.notify()

    def submit_job(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise EngineClosedError(
                    "the engine is closed; create a new one with Engine.load(...)"
                )
            self._sched.add_job(job)
            self._cond.notify()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        if self.on_worker_thread():
            # Already between waves on the worker (e.g. inside a job step): run inline.
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                fut.set_exception(exc)
            return fut
        with self._cond:
            if self._closed:
                raise EngineClosedError(
                    "the engine is closed; create a new one with Engine.load(...)"
                )
            self._sched.add_call(Call(fn, args, kwargs, fut))
            self._cond.notify()
        return fut

    def cancel(self, state: RequestState) -> bool:
        """Cancel a request; False when it had already ended (see the module docstring)."""
        with self._cond:
            queued = self._sched.remove_request(state)
        if queued:  # never runs now: nobody else can resolve it
            return state.finish(FinishReason.CANCELLED)
        return state.cancel()

    def cancel_job(self, job: Job) -> bool:
        with self._cond:
            return self._sched.remove_job(job)

    def depth(self) -> tuple[int, int]:
        with self._cond:
            # rows resolve inside the wave (at their last step): count the unresolved ones
            return self._sched.queued, sum(not s.status.finished for s in self._running)

    def set_running(self, states: list[RequestState]) -> None:
        self._running = states

    def close(self, timeout: float | None = None) -> None:
        with self._cond:
            if self._closed:
                pending: tuple[list[RequestState], list[Job], list[Call]] = ([], [], [])
            else:
                self._closed = True
                pending = self._sched.drain()
                for st in self._running:
                    st.cancel()
                self._cond.notify_all()
            running = list(self._running)
        states, jobs, calls = pending
        for st in states:
            st.finish(FinishReason.CANCELLED)
        for call in calls:
            call.future.set_exception(
                EngineClosedError("the engine was closed before this call ran")
            )
        # Let a running wave stop (its rows are flagged) and a running job step end
        # before failing jobs, so fail() never races the job's own step().
        if not self.on_worker_thread():
            self._thread.join(timeout)
            # Rows the worker did not reach in time (a long step): resolve them here; the
            # worker's later finish() of the same rows is a no-op.
            for st in running:
                st.finish(FinishReason.CANCELLED)
        for job in jobs:
            _fail_job(job, EngineClosedError("the engine was closed before this job finished"))

    # ----- worker thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if not self._sched.has_work():
                        self._cond.wait()
                        continue
                    wait = self._sched.collect_wait()
                    if wait > 0:
                        self._cond.wait(wait)
                        continue
                    work = self._sched.next_work()
                    if work is not None:
                        break
                if isinstance(work, Wave):
                    self._running = work.states
            self._run(work)

    def _run(self, work: Call | Wave | JobStep) -> None:
        if isinstance(work, Call):
            if work.future.cancelled():
                return
            try:
                work.future.set_result(work.fn(*work.args, **work.kwargs))
            except BaseException as exc:
                work.future.set_exception(exc)
        elif isinstance(work, Wave):
            try:
                self._run_wave(work.states)
            finally:
                self._running = []
        else:
            job = work.job
            try:
                more = job.step()
            except BaseException as exc:
                more = False
                _fail_job(job, exc)
            if not more:
                with self._cond:
                    self._sched.job_finished(job)


def _fail_job(job: Job, exc: BaseException) -> None:
    try:
        job.fail(exc)
    except Exception:  # a job's own fail() must never kill the worker thread
        _log.exception("job %r raised in fail(); ignored so the engine keeps serving", job)
