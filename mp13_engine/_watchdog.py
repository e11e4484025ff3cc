# SPDX-License-Identifier: Apache-2.0
"""Deadlines and slow steps: what the engine watches from outside its worker thread.

``StepClock`` times each unit of work the worker runs and learns, per *kind*
of work, how long it usually takes. A kind is what the worker says ran: a
decode step, a step that also prefills prompts, one named worker call
(``call AdapterManager._load_on_worker``, ...) or one kind of job's steps
(``TrainingJob step``): a call that sets up a training adapter and one
that reads the model's dtype are different work, and the first must not be
judged by the second's milliseconds. A unit that runs far past its kind's
usual time is *slow*: it is counted once (``engine.metrics().slow_steps``)
and logged as a warning that says what ran, for how long and what is usual
for it, either when it ends or, while it is still running, by the watchdog,
so a step stuck inside a model call is visible while it hangs. "Far past" is
``slow_step_s`` when the config sets it, else ``max(2 s, 25 x the kind's
average)``, and 30 s while a kind has no average yet (its first run pays for
cold caches and lazy imports).

``Watchdog`` is one daemon thread per engine. It ends every request that
passes its deadline (``Request.timeout_s``, or ``EngineConfig.request_timeout_s``
when the request sets none) with ``ERROR``, through a callback that takes the
request out of the queue or out of the loop, even while the worker is stuck in
a model call: the caller is answered at its deadline whatever the model does.

Invariants: a request is expired at most once and never after it resolved; the
watchdog never touches the model; both classes are thread-safe; a unit is
counted slow at most once; one kind's durations never set another kind's limit.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from mp13_engine._streams import RequestState

_log = logging.getLogger(__name__)

#: How often the watchdog looks at the running step (seconds).
POLL_S = 0.25
_MIN_SLOW_S = 2.0
_FIRST_SLOW_S = 30.0  # a kind's first step (cold caches, lazy imports) has no average yet
_SLOW_FACTOR = 25.0
_EMA = 0.1  # weight of the newest duration in a kind's moving average


def work_name(fn: Callable[..., Any]) -> str:
    """The name a worker call is timed under: ``fn``'s qualified name (through partials).

    Wrappers that should be timed as what they wrap keep its name with ``functools.wraps``.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


@attrs.define
class _Usual:
    """How long one kind of work takes: a moving average over its ``runs``."""

    avg: float
    runs: int = 1

    def add(self, took: float) -> None:
        self.avg = (1 - _EMA) * self.avg + _EMA * took
        self.runs += 1


class StepClock:
    """Times the worker's units of work and counts the slow ones (any thread)."""

    def __init__(
        self, slow_step_s: float | None = None, now: Callable[[], float] = time.perf_counter
    ):
        self._fixed = slow_step_s
        self._now = now
        self._lock = threading.Lock()
        self._usual: dict[str, _Usual] = {}
        self._kind: str | None = None
        self._started = 0.0
        self._flagged = False
        self.slow_steps = 0

    def threshold(self, kind: str) -> float:
        """Seconds after which a unit of ``kind`` counts as slow."""
        if self._fixed is not None:
            return self._fixed
        usual = self._usual.get(kind)
        return _FIRST_SLOW_S if usual is None else max(_MIN_SLOW_S, _SLOW_FACTOR * usual.avg)

    def typical(self, kind: str) -> float | None:
        """The moving average of ``kind``'s durations (seconds); None before it ever ran."""
        with self._lock:
            usual = self._usual.get(kind)
            return None if usual is None else usual.avg

    def begin(self, kind: str) -> None:
        with self._lock:
            self._kind, self._started, self._flagged = kind, self._now(), False

    def end(self) -> None:
        with self._lock:
            kind, took = self._kind, self._now() - self._started
            assert kind is not None, "end() without begin()"  # the worker pairs them in finally
            self._kind = None
            limit = self.threshold(kind)
            usual = self._usual.get(kind)
            known = self._known(kind, limit)  # what was usual before this run
            if usual is None:
                self._usual[kind] = _Usual(took)
            else:
                usual.add(took)
            report = took > limit and not self._flagged
            if report:
                self.slow_steps += 1
        if report:
            _log.warning(
                "the engine's %s took %.2f s (%s); requests waited meanwhile", kind, took, known
            )

    def check(self) -> None:
        """Count and report the step in progress if it already runs too long (watchdog)."""
        with self._lock:
            kind = self._kind
            if kind is None or self._flagged:
                return
            took = self._now() - self._started
            limit = self.threshold(kind)
            if took <= limit:
                return
            self._flagged = True
            self.slow_steps += 1
            known = self._known(kind, limit)
        _log.warning(
            "the engine's %s has been running for %.2f s (%s); requests wait until it "
            "returns, or end at their timeout_s",
            kind,
            took,
            known,
        )

    def _known(self, kind: str, limit: float) -> str:
        """What the clock knows of ``kind``, for a log line (holding the lock)."""
        if self._fixed is not None:
            return f"slow above {limit:.2f} s, EngineConfig.slow_step_s"
        usual = self._usual.get(kind)
        if usual is None:
            return f"its first run, slow above {limit:.2f} s"
        runs = "run" if usual.runs == 1 else "runs"
        return f"typically {usual.avg:.3g} s over {usual.runs} {runs}, slow above {limit:.2f} s"


class Watchdog:
    """Expires requests at their deadlines and polls the step clock (see the module docstring)."""

    def __init__(
        self,
        clock: StepClock,
        expire: Callable[[RequestState, float], None],
        name: str,
    ):
        self._clock = clock
        self._expire = expire
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, tuple[RequestState, float]] = {}
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def track(self, state: RequestState, timeout: float) -> None:
        """End ``state`` with ERROR ``timeout`` seconds after its submission unless it ended."""
        deadline = state.submit_t + timeout
        with self._cond:
            key = next(self._seq)
            self._live[key] = (state, timeout)
            heapq.heappush(self._heap, (deadline, key))
            if self._heap[0][1] == key:
                self._cond.notify()
        state.future.add_done_callback(functools.partial(self._forget, key))

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(1.0)

    def _forget(self, key: int, _future: object = None) -> None:
        with self._cond:
            self._live.pop(key, None)
            # Finished requests leave stale heap entries; rebuild once they dominate.
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
                self._heap = [e for e in self._heap if e[1] in self._live]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            due: list[tuple[RequestState, float]] = []
            with self._cond:
                if self._stopped:
                    return
                now = time.perf_counter()
                while self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    entry = self._live.pop(key, None)
                    if entry is not None:
                        due.append(entry)
                if not due:
                    wait = POLL_S
                    if self._heap:
                        wait = min(wait, max(0.0, self._heap[0][0] - now))
                    self._cond.wait(wait)
            for state, timeout in due:
                if not state.done:
                    try:
                        self._expire(state, timeout)
                    except Exception:  # the watchdog must outlive any single request
                        _log.exception("expiring request %s failed", state.id)
            self._clock.check()
