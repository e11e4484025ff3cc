# SPDX-License-Identifier: Apache-2.0
"""The scheduler: which unit of work the worker runs next.

Three kinds of work:

- **calls** (``_run_on_worker``): run first, between waves, in FIFO order;
- **inference requests**: queued per *group* (requests that can share one
  ``generate`` call); one turn of a request group = one *wave* of up to
  ``max_batch_size`` of its oldest requests;
- **jobs** (training and other stepwise work): objects with ``group_key``
  (hashable), ``step() -> bool`` (one unit of work; False when finished) and
  ``fail(exc)``; one turn of a job group = one ``step()`` of its oldest job.

Groups take turns round-robin, so no group starves: while a training job
runs, queued inference waves still run between its steps, and vice versa.

Threading: every method is called with the engine's scheduler lock held (the
``threading.Condition`` the worker waits on). ``add_*`` / ``remove_request`` /
``cancel_*`` are called by API threads; ``next_work`` / ``collect_wait`` /
``job_finished`` by the worker; ``drain`` by ``close``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Protocol

import attrs

from mp13_engine._streams import RequestState

#: The group of ordinary inference requests (they all share waves today; the
#: key exists so that work needing a different ``generate`` setup can form its own group).
INFERENCE_GROUP: tuple[str, ...] = ("generate",)


class Job(Protocol):
    """Stepwise work interleaved with inference waves (e.g. a training job)."""

    group_key: Hashable

    def step(self) -> bool:
        """Run one unit of work on the worker thread; return False when finished."""

    def fail(self, exc: BaseException) -> None:
        """Called (on the worker or by ``close``) when the job raised or the engine closes."""


@attrs.define
class Call:
    """A function to run on the worker between waves; its outcome goes to ``future``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Any]


@attrs.define
class Wave:
    """Requests (one group) to run in one ``generate`` call."""

    group: Hashable
    states: list[RequestState]


@attrs.define
class JobStep:
    """One ``step()`` of ``job``."""

    job: Job


Work = Call | Wave | JobStep


class Scheduler:
    """Queues and the round-robin order of groups (see the module docstring for threading)."""

    def __init__(self, max_batch_size: int, batch_wait_s: float, max_wait_factor: float = 5.0):
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.max_wait_s = batch_wait_s * max_wait_factor
        self._last_enqueue: dict[Hashable, float] = {}
        self.preparing = 0  # requests being prepared by API threads (see collect_wait)
        self._calls: collections.deque[Call] = collections.deque()
        self._requests: dict[Hashable, collections.deque[RequestState]] = {}
        self._jobs: dict[Hashable, collections.deque[Job]] = {}
        self._order: collections.deque[Hashable] = collections.deque()  # round-robin turns
        self.queued = 0

    # ----- API threads
    def add_request(self, state: RequestState, group: Hashable = INFERENCE_GROUP) -> None:
        self._requests.setdefault(group, collections.deque()).append(state)
        self._last_enqueue[group] = time.perf_counter()
        self._enlist(("req", group))
        self.queued += 1

    def add_job(self, job: Job) -> None:
        self._jobs.setdefault(job.group_key, collections.deque()).append(job)
        self._enlist(("job", job.group_key))

    def add_call(self, call: Call) -> None:
        self._calls.append(call)

    def remove_request(self, state: RequestState) -> bool:
        """Take a still-queued request out (cancel before it runs); False if not queued."""
        for q in self._requests.values():
            try:
                q.remove(state)
            except ValueError:
                continue
            self.queued -= 1
            return True
        return False

    def remove_job(self, job: Job) -> bool:
        q = self._jobs.get(job.group_key)
        if q is not None and job in q:
            q.remove(job)
            return True
        return False

    # ----- worker
    def has_work(self) -> bool:
        return bool(self._calls) or any(self._requests.values()) or any(self._jobs.values())

    def collect_wait(self, now: float | None = None) -> float:
        """Seconds the worker should still wait for more requests to join the next wave.

        Non-zero only when the next turn is an inference wave that is not full
        and a request joined it less than ``batch_wait_s`` ago: the window
        restarts with each arrival (threads that submit "at once" still arrive
        spread out, each rendering its prompt first), but never extends past
        ``max_wait_s`` after the oldest request was submitted. While API
        threads are still preparing requests (``preparing`` > 0: rendering
        prompts that are on their way), the worker waits for them too, up to
        the same cap.
        """
        if self._calls or self.batch_wait_s <= 0:
            return 0.0
        turn = self._peek_turn()
        if turn is None or turn[0] != "req":
            return 0.0
        q = self._requests[turn[1]]
        if len(q) >= self.max_batch_size:
            return 0.0
        now = time.perf_counter() if now is None else now
        cap = q[0].submit_t + self.max_wait_s
        if self.preparing > 0:
            return max(0.0, cap - now)
        quiet_at = self._last_enqueue.get(turn[1], 0.0) + self.batch_wait_s
        return max(0.0, min(quiet_at, cap) - now)

    def next_work(self) -> Work | None:
        if self._calls:
            return self._calls.popleft()
        turn = self._peek_turn()
        if turn is None:
            return None
        self._order.rotate(-1)  # this group had its turn: move it to the back
        kind, key = turn
        if kind == "req":
            q = self._requests[key]
            states = [q.popleft() for _ in range(min(self.max_batch_size, len(q)))]
            self.queued -= len(states)
            return Wave(group=key, states=states)
        return JobStep(job=self._jobs[key][0])

    def job_finished(self, job: Job) -> None:
        """The worker reports that ``job`` finished (or failed): drop it from its group."""
        self.remove_job(job)

    def drain(self) -> tuple[list[RequestState], list[Job], list[Call]]:
        """Empty every queue (engine close) and return what was pending."""
        states = [s for q in self._requests.values() for s in q]
        jobs = [j for q in self._jobs.values() for j in q]
        calls = list(self._calls)
        self._requests.clear()
        self._jobs.clear()
        self._calls.clear()
        self._order.clear()
        self.queued = 0
        return states, jobs, calls

    # ----- internals
    def _enlist(self, turn: tuple[str, Hashable]) -> None:
        if turn not in self._order:
            self._order.append(turn)

    def _peek_turn(self) -> tuple[str, Hashable] | None:
        # Drop empty groups lazily, then the front of the order is the next turn.
        for _ in range(len(self._order)):
            kind, key = self._order[0]
            pending = self._requests.get(key) if kind == "req" else self._jobs.get(key)
            if pending:
                return kind, key
            self._order.popleft()
        return None
