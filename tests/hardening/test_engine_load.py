# SPDX-License-Identifier: MIT
"""A loaded engine with random cancels, timeouts, streams and adapters, from many threads.

The campaign of issue 11 re-run with new cases: requests arrive from four threads at
once, through every entry point (``submit``, ``generate``, ``stream`` abandoned after a
few chunks, ``agenerate`` whose task is cancelled, ``cancel(id)``, ``Future.cancel``)
with deadlines of a millisecond to a second and any mix of adapters. Every request
resolves exactly once; whatever ended on its own is its greedy solo reply, whatever was
cut is a prefix of it; a second round leaves memory and threads where the first left
them; ``close`` with requests in flight answers all of them.
"""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
from collections import Counter
from concurrent.futures import CancelledError

import pytest

from mp13_engine import Engine, FinishReason, Request

PROMPTS = ["hello", "one two three", "a longer prompt about many many things " * 3, "x", "ok?"]
ADAPTERS = [None, [], ["a"], ["b"], ["a", "b"]]
LENGTHS = (1, 2, 5, 12, 24)
HOW = ["submit", "submit", "generate", "stream", "agenerate", "cancel", "future-cancel", "timeout"]


def _request(spec, **fields) -> Request:
    prompt, n, adapters = spec
    messages = [{"role": "user", "content": PROMPTS[prompt]}]
    return Request(messages=messages, max_new_tokens=n, adapters=ADAPTERS[adapters], **fields)


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


class _Load:
    """One round of ``count`` requests from ``threads`` threads; checks as it goes."""

    def __init__(self, engine, solo, seed: int) -> None:
        self.engine, self.solo, self.rng = engine, solo, random.Random(seed)
        self.lock = threading.Lock()
        self.results: Counter = Counter()
        self.resolved: Counter = Counter()
        self.failures: list[str] = []

    def _check(self, spec, how, response) -> None:
        expected = self.solo[spec]
        reason = response.finish_reason
        with self.lock:
            self.results[(how, reason)] += 1
        if reason in (FinishReason.LENGTH, FinishReason.STOP):
            ok = response.raw_text == expected
        elif reason is FinishReason.CANCELLED:
            ok = how in ("stream", "agenerate", "cancel", "future-cancel") and expected.startswith(
                response.raw_text
            )
        else:
            ok = how == "timeout" and "timed out" in (response.error or "")
        if not ok:
            with self.lock:
                self.failures.append(
                    f"{how} {spec}: {reason} {response.error} {response.raw_text!r}"
                )

    def _one(self, rng: random.Random) -> None:
        spec = (rng.randrange(len(PROMPTS)), rng.choice(LENGTHS), rng.randrange(len(ADAPTERS)))
        how = rng.choice(HOW)
        engine = self.engine
        fields = {"timeout_s": rng.choice([0.001, 0.01, 1.0])} if how == "timeout" else {}
        request = _request(spec, **fields)
        if how == "generate":
            self._check(spec, how, engine.generate(request))
            return
        if how == "stream":
            stream = engine.stream(request)
            for i, chunk in enumerate(stream):
                if chunk.done:
                    self._check(spec, how, chunk.response)
                    return
                if i == rng.randrange(3):
                    stream.close()  # abandoned: cancels the request
            return
        if how == "agenerate":
            response = asyncio.run(self._agenerate(request, rng.random() * 0.02))
            if response is not None:
                self._check(spec, how, response)
            else:  # the task was cancelled first (and its request left the engine): exercised
                with self.lock:
                    self.results[(how, "task cancelled")] += 1
            return
        future = engine.submit(request)
        future.add_done_callback(lambda _, rid=request.id: self._resolved(rid))
        if how == "cancel":
            time.sleep(rng.random() * 0.005)
            engine.cancel(request.id)
        if how == "future-cancel":
            time.sleep(rng.random() * 0.005)
            future.cancel()
        try:
            self._check(spec, how, future.result(timeout=120))
        except CancelledError:
            assert how == "future-cancel"

    def _resolved(self, rid: str) -> None:
        with self.lock:
            self.resolved[rid] += 1

    async def _agenerate(self, request: Request, after: float):
        task = asyncio.ensure_future(self.engine.agenerate(request))
        await asyncio.sleep(after)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            # Cancelling the awaiting task cancels the request: it must leave the engine.
            for _ in range(1000):
                if request.id not in self.engine._inflight:
                    return None
                await asyncio.sleep(0.01)
            raise AssertionError(f"request {request.id} unresolved after its task ended") from None

    def run(self, count: int, threads: int = 4) -> None:
        seeds = [self.rng.randrange(2**32) for _ in range(threads)]

        def work(seed):
            rng = random.Random(seed)
            try:
                for _ in range(count // threads):
                    self._one(rng)
            except BaseException as exc:  # reported below, with the thread's seed
                with self.lock:
                    self.failures.append(f"thread {seed}: {type(exc).__name__}: {exc}")

        pool = [threading.Thread(target=work, args=(s,)) for s in seeds]
        for t in pool:
            t.start()
        for t in pool:
            t.join(300)
        assert not self.failures, self.failures[:5]
        assert all(n == 1 for n in self.resolved.values())


@pytest.fixture
def engine(tiny, adapters):
    with Engine.load(
        str(tiny), device="cpu", adapters_dir=str(adapters), prefix_cache_mb=4, max_batch_size=8
    ) as engine:
        engine.adapters.load("a")
        engine.adapters.load("b")
        yield engine


def _solo(engine) -> dict:
    specs = [(p, n, a) for p in range(len(PROMPTS)) for n in LENGTHS for a in range(5)]
    out = engine.generate_many([_request(s) for s in specs])
    return {s: r.raw_text for s, r in zip(specs, out, strict=True)}


def _settle(engine) -> None:
    deadline = time.monotonic() + 10
    loop = engine._loop
    while time.monotonic() < deadline and (engine._inflight or loop.kv.rows or loop.prefills):
        time.sleep(0.01)
    assert not engine._inflight and engine._loop.kv.rows == 0 and not engine._loop.prefills


def test_a_loaded_engine_answers_every_request_exactly(engine):
    solo = _solo(engine)
    load = _Load(engine, solo, seed=11)
    load.run(200)
    _settle(engine)
    kinds = {how for how, _ in load.results}
    assert {"submit", "stream", "generate", "agenerate", "timeout"} <= kinds
    assert engine.generate(_request((0, 5, 2))).raw_text == solo[(0, 5, 2)]


@pytest.mark.slow
def test_a_thousand_requests_twice_leave_memory_and_threads_flat(engine):
    solo = _solo(engine)
    _Load(engine, solo, seed=1).run(1000)
    _settle(engine)
    gc.collect()
    threads, rss = threading.active_count(), _rss_kb()
    _Load(engine, solo, seed=2).run(1000)
    _settle(engine)
    gc.collect()
    assert threading.active_count() == threads
    assert _rss_kb() - rss < 64 * 1024  # KB: the second round keeps nothing the first did not


def test_close_with_requests_in_flight_answers_all_of_them(tiny, adapters):
    engine = Engine.load(str(tiny), device="cpu", adapters_dir=str(adapters))
    engine.adapters.load("a")
    futures = [engine.submit(_request((2, 24, i % 5))) for i in range(60)]
    streams = [engine.stream(_request((1, 24, 2))) for _ in range(4)]
    time.sleep(0.05)
    engine.close(timeout=5)
    reasons = Counter(f.result(timeout=0).finish_reason for f in futures)
    assert sum(reasons.values()) == 60 and reasons[FinishReason.CANCELLED] > 0
    for stream in streams:
        last = list(stream)[-1]
        assert last.done and last.response.finish_reason in (
            FinishReason.CANCELLED,
            FinishReason.LENGTH,
        )
