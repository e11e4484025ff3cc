# SPDX-License-Identifier: Apache-2.0
"""Drive an engine's decode loop by hand, one step at a time, on the test thread.

Tests that count steps (arrivals at a given step, cancels, chunked prefill)
need the loop without the worker's timing: ``StepHarness(engine)`` closes the
engine's worker (load adapters before), then builds a fresh ``DecodeLoop`` over
the same model and adapters. Requests are prepared exactly as the engine
prepares them (``engine._prepare``: template, tokens, validation).
"""

from __future__ import annotations

from collections.abc import Iterable

from mp13_engine import Request, Response
from mp13_engine._loop import DecodeLoop
from mp13_engine._prefix_cache import PrefixCache
from mp13_engine._streams import RequestState


class StepHarness:
    def __init__(
        self,
        engine,
        *,
        max_batch_size: int = 8,
        chunk_tokens: int = 512,
        prefix_cache_mb: float = 0.0,
        packed: bool = True,
    ):
        model = engine.model
        engine.close()  # the test thread is the worker from now on
        engine._state.model = model  # close() lets go of the model; the harness serves it
        self.engine = engine
        self.prefix = PrefixCache(int(prefix_cache_mb * 2**20))
        self.loop = DecodeLoop(
            engine._state,
            lambda: engine.adapters,
            self.prefix,
            max_batch_size,
            chunk_tokens,
            packed,
        )
        self.waiting: list[RequestState] = []

    def prepare(self, request: Request) -> RequestState:
        st = self.engine._prepare(request, {})
        assert not st.done, st.response
        return st

    def submit(self, request: Request) -> RequestState:
        st = self.prepare(request)
        self.waiting.append(st)
        return st

    def step(self) -> None:
        take = self.waiting[: max(0, self.loop.free_slots())]
        self.waiting = self.waiting[len(take) :]
        self.loop.step(take)

    def run(self, states: Iterable[RequestState], limit: int = 10_000) -> list[Response]:
        states = list(states)
        for _ in range(limit):
            if all(s.done for s in states):
                return [s.response for s in states]
            self.step()
        raise AssertionError("the requests did not finish")

    def solo(self, request: Request) -> Response:
        return self.run([self.submit(request)])[0]
