# SPDX-License-Identifier: Apache-2.0
"""The worker thread: the only thread that touches the model.

It loops: wait for work, let the ``Scheduler`` pick the next unit (a call, a
decode step or a job step), run it outside the lock, repeat. Public API
threads hand it work through ``submit_requests`` / ``submit_job`` / ``call``
and get results back through futures. After every call and job step the decode
loop is told what of the weights changed: what the call or step said through
:meth:`Worker.note_change` (a ``WeightsChange``), or, when it said nothing,
everything (a call) or every adapter's weights (a job step).

Never stops answering (the engine's robustness contract):

- nothing a model, hook, call or job raises, ``BaseException`` included
  (``SystemExit`` from model code), ends the thread: a decode step's faults are
  isolated per row by the loop, and a failure of the loop itself ends the
  loop's rows ``ERROR`` and the engine serves on;
- if the thread dies anyway (a bug in this module), every pending request
  resolves ``ERROR``, pending calls and jobs fail, and later calls raise
  ``EngineClosedError`` saying the worker died;
- ``close(timeout)`` drains the queues (queued requests resolve
  ``CANCELLED``, pending calls raise ``EngineClosedError``), lets the running
  step end, resolves the loop's rows ``CANCELLED``, and, if the thread is stuck
  in a model call past ``timeout``, resolves them itself; every unfinished job
  then gets ``fail(EngineClosedError)`` (never racing its own step when the
  thread did stop); once closed, the thread's last act is ``on_stop`` (the
  engine lets go of its model there), so a step that outlived ``timeout``, or
  a ``close()`` called on this thread itself, still frees it when it ends;
- the ``Watchdog`` ends requests at their deadline and reports slow steps,
  also while this thread is stuck.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from mp13_engine._changes import EVERY_ADAPTER, EVERYTHING, NOTHING, WeightsChange
from mp13_engine._errors import EngineClosedError
from mp13_engine._loop import DecodeLoop
from mp13_engine._scheduler import Call, Decode, Job, JobStep, Scheduler
from mp13_engine._streams import RequestState
from mp13_engine._types import FinishReason
from mp13_engine._watchdog import StepClock, Watchdog, work_name

_log = logging.getLogger(__name__)

_W = TypeVar("_W")  # a unit of work the scheduler queues

_CLOSED = "the engine is closed; create a new one with Engine.load(...)"


class Worker:
    def __init__(
        self,
        scheduler: Scheduler,
        loop: DecodeLoop,
        name: str,
        clock: StepClock | None = None,
        default_timeout_s: float | None = None,
        on_stop: Callable[[], None] | None = None,
    ):
        self._sched = scheduler
        self._on_stop = on_stop
        self._loop = loop
        self._default_timeout = default_timeout_s
        self._cond = threading.Condition()
        self._closed = False
        self._died: str | None = None  # why the thread died, once it did
        self._exited = False  # the thread has ended
        self._handed_off = False  # close() is done with the model (see _let_go)
        self._active: set[RequestState] = set()  # admitted to the loop, not known to be done
        # What the running call or job step said it changed (None: nothing said yet), and
        # what calls it ran inline said (see note_change); worker thread only.
        self._said: WeightsChange | None = None
        self._inline = NOTHING
        self.clock = clock or StepClock()
        self._watchdog = Watchdog(self.clock, self._expire, name=f"{name}-watchdog")
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    # ----- any thread
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stopped(self) -> bool:
        """True once the thread has ended (closed, or died): nothing touches the model any more."""
        return not self._thread.is_alive()

    def closed_error(self) -> EngineClosedError:
        return EngineClosedError(self._died or _CLOSED)

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def preparing(self, delta: int) -> None:
        """API threads announce requests they are preparing (+n) and drop them (-n)."""
        with self._cond:
            self._sched.preparing += delta
            if delta < 0:
                self._cond.notify()

    def _enqueue(self, add: Callable[[_W], None], *items: _W) -> None:
        """``add`` each item to the scheduler and wake the thread; EngineClosedError once closed."""
        with self._cond:
            if self._closed:
                raise self.closed_error()
            for item in items:
                add(item)
            self._cond.notify()

    def submit_requests(self, states: list[RequestState]) -> None:
        self._enqueue(self._sched.add_request, *states)
        for st in states:
            timeout = st.request.timeout_s
            if timeout is None:
                timeout = self._default_timeout
            if timeout is not None:
                self._watchdog.track(st, float(timeout))

    def submit_job(self, job: Job) -> None:
        self._enqueue(self._sched.add_job, job)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        if self.on_worker_thread():
            # Already between steps on the worker (e.g. inside a job step): run inline. What
            # it changes counts with the enclosing unit's change (everything if it says nothing).
            outer, self._said = self._said, None
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                fut.set_exception(exc)
            finally:
                self._inline |= EVERYTHING if self._said is None else self._said
                self._said = outer
            return fut
        self._enqueue(self._sched.add_call, Call(fn, args, kwargs, fut))
        return fut

    def note_change(self, change: WeightsChange) -> None:
        """*worker*: the running call or job step changed ``change`` of the weights (adds up).

        A call that never says is taken to have changed everything, a job step every
        adapter's weights; say ``NOTHING`` to keep every cached block."""
        self._said = change if self._said is None else self._said | change

    def cancel(self, state: RequestState) -> bool:
        """Cancel a request; False when it had already ended.

        Resolved here, at once, with the text produced so far: a queued request is
        taken out of the queue; a running one is marked (``RequestState.cancel``)
        and resolved, so the caller does not wait for the step in progress. The
        loop drops its row, and frees the row's cache, at its next step (a step
        already running finishes its forward first; the row's token from it is
        discarded).
        """
        with self._cond:
            queued = self._sched.remove_request(state)
        if queued:
            return state.finish(FinishReason.CANCELLED)
        if not state.cancel():
            return False
        state.finish(FinishReason.CANCELLED)  # a no-op when the loop resolved it meanwhile
        return True

    def cancel_job(self, job: Job) -> bool:
        with self._cond:
            return self._sched.remove_job(job)

    def depth(self) -> tuple[int, int]:
        """(queued requests, requests in the decode loop)."""
        with self._cond:
            return self._sched.queued, sum(not s.done for s in self._active)

    def close(self, timeout: float | None = None) -> None:
        with self._cond:
            if self._closed:
                pending: tuple[list[RequestState], list[Job], list[Call]] = ([], [], [])
            else:
                self._closed = True
                pending = self._sched.drain()
                for st in self._active:
                    st.cancel()
                self._cond.notify_all()
        states, jobs, calls = pending
        for st in states:
            st.finish(FinishReason.CANCELLED)
        for call in calls:
            call.future.set_exception(
                EngineClosedError("the engine was closed before this call ran")
            )
        # Let the running step end (its rows are flagged) before failing jobs, so fail()
        # never races the job's own step().
        if not self.on_worker_thread():
            self._thread.join(timeout)
        if self._thread.is_alive() and not self.on_worker_thread():
            # Stuck inside a model call: answer its requests now; its results are dropped.
            with self._cond:
                stuck = [s for s in self._active if not s.done]
            if stuck:
                _log.warning(
                    "close(): the worker is still inside a step after %s s; resolving its "
                    "%d request(s) as cancelled",
                    timeout,
                    len(stuck),
                )
            for st in stuck:
                st.finish(FinishReason.CANCELLED)
        for job in jobs:
            _fail_job(job, EngineClosedError("the engine was closed before this job finished"))
        self._watchdog.stop()
        # Whichever of close() and the thread's exit comes second lets go of the model:
        # not while a step or a job's fail() may still use it, never left for no one.
        with self._cond:
            self._handed_off = True
            last = self._exited
        if last:
            self._let_go()

    def _let_go(self) -> None:
        if self._on_stop is None:
            return
        try:
            self._on_stop()
        except Exception:  # letting go must not turn a clean close into an error
            _log.exception("releasing the engine's model after close failed")

    def _expire(self, state: RequestState, timeout: float) -> None:
        """The watchdog's callback: ``state`` passed its deadline (any thread)."""
        with self._cond:
            self._sched.remove_request(state)
        state.finish(
            FinishReason.ERROR,
            f"request {state.id} timed out after {timeout:g} s; raise Request.timeout_s (or "
            "EngineConfig.request_timeout_s, its default), or ask for fewer tokens",
        )

    # ----- worker thread
    def _main(self) -> None:
        try:
            self._run_until_closed()
        finally:
            with self._cond:
                self._exited = True
                last = self._handed_off
            if last:  # close() has returned, or gave up waiting: let go here
                self._let_go()

    def _run_until_closed(self) -> None:
        try:
            self._serve()
        except BaseException as exc:
            self._die(exc)
            return
        # Closed: the rows still in the loop were flagged by close(); resolve them now.
        self._loop.abort(FinishReason.CANCELLED)
        with self._cond:
            left = [s for s in self._active if not s.done]
            self._active.clear()
        # Admitted but never in the loop (a step failed before its rows joined): no one
        # else will answer them.
        for st in left:
            st.finish(FinishReason.CANCELLED)

    def _serve(self) -> None:
        while True:
            with self._cond:
                work = self._next_locked()
                if work is None:
                    return
                if isinstance(work, Decode):
                    self._active.update(work.admitted)
            self._run(work)

    def _next_locked(self) -> Call | Decode | JobStep | None:
        while True:
            if self._closed:
                return None
            decoding = self._loop.active
            if not self._sched.has_work(decoding):
                self._cond.wait()
                continue
            wait = self._sched.collect_wait(decoding)
            if wait > 0:
                self._cond.wait(wait)
                continue
            work = self._sched.next_work(decoding, self._loop.free_slots())
            if work is not None:
                return work

    def _run(self, work: Call | Decode | JobStep) -> None:
        started = time.perf_counter()
        try:
            self._run_work(work)
        finally:
            if not isinstance(work, Call):
                took = time.perf_counter() - started
                with self._cond:
                    self._sched.charge(took)

    def _run_work(self, work: Call | Decode | JobStep) -> None:
        if isinstance(work, Decode):
            # Steps that prefill prompt chunks take longer than plain decode steps: timed apart.
            prefills = bool(work.admitted or self._loop.prefills)
            self.clock.begin("prefill step" if prefills else "decode step")
            try:
                self._loop.step(work.admitted)
            except BaseException as exc:
                # A bug of the loop itself (model faults are handled inside): its rows'
                # state cannot be trusted, so they end ERROR and the loop starts over.
                _log.exception("a decode step failed outside the model; failing its requests")
                why = (
                    str(exc)
                    if isinstance(exc, EngineClosedError)
                    else f"the engine's step failed ({type(exc).__name__}: {exc}); send the "
                    "request again"
                )
                self._loop.abort(FinishReason.ERROR, why)
                # The step may have failed before its admitted requests became rows of
                # the loop (abort does not know them): they would wait forever.
                for st in work.admitted:
                    st.finish(FinishReason.ERROR, why)  # a no-op when resolved
            finally:
                self.clock.end()
            with self._cond:
                self._active = {s for s in self._active if not s.done}
            return
        if isinstance(work, Call):
            if work.future.cancelled():
                return
            self.clock.begin(f"call {work_name(work.fn)}")
            self._said, self._inline = None, NOTHING
            result: Any = None
            error: BaseException | None = None
            try:
                result = work.fn(*work.args, **work.kwargs)
            except BaseException as exc:
                error = exc
            finally:
                self.clock.end()
            # The loop hears of the change before the caller does: once e.g. unload() or
            # load(replace=True) returns, the stale prefix-cache blocks are gone from
            # metrics() and the rows on an unloaded adapter are resolved.
            self._changed(EVERYTHING)
            if error is not None:
                work.future.set_exception(error)
            else:
                work.future.set_result(result)
            return
        job = work.job
        self.clock.begin(f"{type(job).__name__} step")
        self._said, self._inline = None, NOTHING
        try:
            more = job.step()
        except BaseException as exc:
            more = False
            _fail_job(job, exc)
        finally:
            self.clock.end()
        if not more:
            with self._cond:
                self._sched.remove_job(job)
        self._changed(EVERY_ADAPTER)

    def _changed(self, unsaid: WeightsChange) -> None:
        """Tell the loop what the unit that ran changed (``unsaid``: if it said nothing)."""
        change = (unsaid if self._said is None else self._said) | self._inline
        self._said, self._inline = None, NOTHING
        try:
            self._loop.weights_changed(change)
        except BaseException:
            _log.exception("checking the loop after a change failed; failing its requests")
            self._loop.abort(
                FinishReason.ERROR,
                "the engine could not check this request's adapter after a change; send it again",
            )

    def _die(self, exc: BaseException) -> None:
        message = (
            f"the engine's worker thread stopped after an internal error "
            f"({type(exc).__name__}: {exc}); create a new engine with Engine.load(...)"
        )
        _log.critical("%s", message, exc_info=exc)
        with self._cond:
            self._died = message
            self._closed = True
            states, jobs, calls = self._sched.drain()
            states += [s for s in self._active if not s.done]
            self._active.clear()
        for st in states:
            try:
                st.finish(FinishReason.ERROR, message)
            except BaseException:
                _log.exception("resolving request %s failed", st.id)
        for call in calls:
            call.future.set_exception(EngineClosedError(message))
        for job in jobs:
            _fail_job(job, EngineClosedError(message))
        self._watchdog.stop()


def _fail_job(job: Job, exc: BaseException) -> None:
    try:
        job.fail(exc)
    except Exception:  # a job's own fail() must never kill the worker thread
        _log.exception("job %r raised in fail(); ignored so the engine keeps serving", job)
