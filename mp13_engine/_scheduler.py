# SPDX-License-Identifier: Apache-2.0
"""The scheduler: which unit of work the worker runs next.

Three kinds of work:

- **calls** (``_run_on_worker``): run first, between two steps, in FIFO order;
- **inference**: requests wait in one FIFO queue; one turn of inference is one
  step of the decode loop (``_loop.DecodeLoop``), which admits as many of the
  oldest waiting requests as it has free rows (:class:`Decode`);
- **jobs** (training and other stepwise work): objects with ``group_key``
  (hashable), ``step() -> bool`` (one unit of work; False when finished) and
  ``fail(exc)``; one turn of a job group is one ``step()`` of its oldest job.

Inference and the job groups share the worker fairly *by time*: the worker
charges each turn the seconds it took (:meth:`Scheduler.charge`), and the next
turn goes to the group with work that has used the least time since it became
busy (turns within ``QUANTUM_S`` of it are tied and go round-robin). So none
starves, and a group with short steps is not made to wait a long step of
another for each of its own: while a training job runs, requests decode at
about half their usual speed instead of one token per training step, and the
job trains at about half speed while requests decode. A group that becomes
busy starts level with the least-served busy group (idle time earns no
credit). Inference is busy while requests wait or the loop has rows
(``decoding``, told by the worker, which owns the loop).

Threading: every method is called with the engine's scheduler lock held (the
``threading.Condition`` the worker waits on). ``add_*`` / ``remove_*`` are
called by API threads; ``next_work`` / ``charge`` / ``collect_wait`` and
``remove_job`` (a finished job) by the worker; ``drain`` by ``close``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Protocol

import attrs

from mp13_engine._streams import RequestState

#: A turn in the round-robin order: inference's, or a job group's (``("job", key)``).
Turn = tuple[str, Hashable]
_DECODE: Turn = ("decode", None)

#: Turns within this many seconds of the least-served busy turn count as tied and go
#: round-robin, so groups whose steps cost about the same simply alternate.
QUANTUM_S = 0.005


class Job(Protocol):
    """Stepwise work interleaved with decode steps (e.g. a training job)."""

    group_key: Hashable

    def step(self) -> bool:
        """Run one unit of work on the worker thread; return False when finished."""

    def fail(self, exc: BaseException) -> None:
        """Called (on the worker or by ``close``) when the job raised or the engine closes."""


@attrs.define
class Call:
    """A function to run on the worker between steps; its outcome goes to ``future``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Any]


@attrs.define
class Decode:
    """One step of the decode loop, admitting ``admitted`` (possibly none)."""

    admitted: list[RequestState]


@attrs.define
class JobStep:
    """One ``step()`` of ``job``."""

    job: Job


Work = Call | Decode | JobStep


class Scheduler:
    """Queues and the round-robin order (see the module docstring for threading)."""

    def __init__(self, max_batch_size: int, batch_wait_s: float, max_wait_factor: float = 5.0):
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.max_wait_s = batch_wait_s * max_wait_factor
        self._last_enqueue = 0.0
        self.preparing = 0  # requests being prepared by API threads (see collect_wait)
        self._calls: collections.deque[Call] = collections.deque()
        self._requests: collections.deque[RequestState] = collections.deque()
        self._jobs: dict[Hashable, collections.deque[Job]] = {}
        self._order: collections.deque[Turn] = collections.deque([_DECODE])
        self._used: dict[Turn, float] = {}  # worker seconds of each busy turn (see charge)
        self._last: Turn | None = None  # the turn of the work handed out last

    @property
    def queued(self) -> int:
        return len(self._requests)

    # ----- API threads
    def add_request(self, state: RequestState) -> None:
        self._requests.append(state)
        self._last_enqueue = time.perf_counter()

    def add_job(self, job: Job) -> None:
        key = job.group_key
        self._jobs.setdefault(key, collections.deque()).append(job)
        if ("job", key) not in self._order:
            self._order.append(("job", key))

    def add_call(self, call: Call) -> None:
        self._calls.append(call)

    def remove_request(self, state: RequestState) -> bool:
        """Take a still-queued request out (cancel before it runs); False if not queued."""
        try:
            self._requests.remove(state)
        except ValueError:
            return False
        return True

    def remove_job(self, job: Job) -> bool:
        """Drop ``job`` from its group (cancelled, or the worker saw it finish or fail)."""
        q = self._jobs.get(job.group_key)
        if q is not None and job in q:
            q.remove(job)
            return True
        return False

    # ----- worker
    def has_work(self, decoding: bool = False) -> bool:
        return bool(self._calls or self._requests or decoding or any(self._jobs.values()))

    def collect_wait(self, decoding: bool = False, now: float | None = None) -> float:
        """Seconds the worker should still wait for more requests to join the first step.

        Only while the loop is idle (a running loop admits arrivals at its next
        step anyway) and inference has the next turn with fewer requests than
        a full batch: then requests that arrive "at once" (threads each
        rendering a prompt first) are prefilled together, as one batch. The
        window restarts with each arrival but never extends past
        ``max_wait_s`` after the oldest request was submitted; while API
        threads are still preparing requests (``preparing`` > 0) the worker
        waits for them too, up to the same cap.
        """
        if decoding or self._calls or self.batch_wait_s <= 0 or not self._requests:
            return 0.0
        if self._peek_turn(decoding) != _DECODE or len(self._requests) >= self.max_batch_size:
            return 0.0
        now = time.perf_counter() if now is None else now
        cap = self._requests[0].submit_t + self.max_wait_s
        if self.preparing > 0:
            return max(0.0, cap - now)
        quiet_at = self._last_enqueue + self.batch_wait_s
        return max(0.0, min(quiet_at, cap) - now)

    def next_work(self, decoding: bool = False, free: int | None = None) -> Work | None:
        """The next unit of work; a :class:`Decode` admits up to ``free`` waiting requests."""
        if self._calls:
            self._last = None  # calls are not charged: they run first, whoever waits
            return self._calls.popleft()
        turn = self._peek_turn(decoding)
        if turn is None:
            return None
        self._order.remove(turn)  # this group had its turn: to the back for ties
        self._order.append(turn)
        self._last = turn
        if turn == _DECODE:
            room = self.max_batch_size if free is None else max(0, free)
            take = min(room, len(self._requests))
            return Decode([self._requests.popleft() for _ in range(take)])
        return JobStep(job=self._jobs[turn[1]][0])

    def charge(self, seconds: float) -> None:
        """The work handed out last took ``seconds`` of the worker's time."""
        if self._last is not None and self._last in self._used:
            self._used[self._last] += seconds

    def drain(self) -> tuple[list[RequestState], list[Job], list[Call]]:
        """Empty every queue (engine close) and return what was pending."""
        states = list(self._requests)
        jobs = [j for q in self._jobs.values() for j in q]
        calls = list(self._calls)
        self._requests.clear()
        self._jobs.clear()
        self._calls.clear()
        self._order = collections.deque([_DECODE])
        self._used.clear()
        return states, jobs, calls

    # ----- internals
    def _peek_turn(self, decoding: bool) -> Turn | None:
        """The busy turn that has used the least worker time (first in order on ties)."""
        busy = []
        for turn in list(self._order):
            if turn == _DECODE:
                if decoding or self._requests:
                    busy.append(turn)
            elif self._jobs.get(turn[1]):
                busy.append(turn)
            else:  # a job group that ran dry
                self._order.remove(turn)
                self._jobs.pop(turn[1], None)
        if not busy:
            self._used.clear()
            return None
        for turn in list(self._used):
            if turn not in busy:
                del self._used[turn]  # idle: it starts level when busy again
        floor = min(self._used.values(), default=0.0)
        for turn in busy:
            self._used.setdefault(turn, floor)
        least = min(self._used[t] for t in busy)
        return next(t for t in busy if self._used[t] <= least + QUANTUM_S)
