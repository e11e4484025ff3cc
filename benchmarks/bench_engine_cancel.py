# SPDX-License-Identifier: Apache-2.0
"""Cancellation latency: time from ``engine.cancel(id)`` to the request returning, in decode steps.

Run: ``python benchmarks/bench_engine_cancel.py``. A long request runs alone,
or as one row of a wave of 4; after a varying number of tokens it is cancelled
and we time until its ``Response`` (``CANCELLED``) is available to the caller.
The latency is divided by the same run's mean decode-step time. Goal: p95 ≤ 1 step.
The worker resolves the response at its next step (and drops the row's cache
then); the last column shows (for a lone request) when a worker call queued
right after the cancel ran, i.e. when the step in progress had ended.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

from _bench_engine_common import (
    build_models,
    new_parser,
    percentile,
    print_table,
    run_benchmark,
)

from mp13_engine import Engine, FinishReason, Request


def _trial(engine: Engine, wave: int, after: int) -> tuple[float, float, float | None]:
    reqs = [Request(prompt=f"cancel bench {i}", max_new_tokens=2000) for i in range(wave)]
    futures = [engine.submit(r) for r in reqs]
    victim = reqs[0]
    state = engine._inflight[victim.id]
    while len(state.tokens) < after:
        time.sleep(0.0002)
    t0 = time.perf_counter()
    engine.cancel(victim.id)
    resp = futures[0].result()
    latency = time.perf_counter() - t0
    assert resp.finish_reason is FinishReason.CANCELLED
    freed = None
    if wave == 1:
        # A call runs between two steps: it returns once the step in progress ended.
        engine._run_on_worker(lambda: None)
        freed = time.perf_counter() - t0
    for r in reqs[1:]:
        engine.cancel(r.id)
    for f in futures[1:]:
        f.result()
    step = (resp.metrics.total_s - resp.metrics.ttft_s) / max(1, resp.metrics.completion_tokens - 1)
    return latency, step, freed


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    ap.add_argument(
        "--trials",
        type=int,
        default=30,
        metavar="N",
        help="cancellations per model and wave size (default 30); fewer is quicker",
    )
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
    rng = random.Random(0)
    rows = []
    for size, path in build_models(args.workdir, extra=args.model).items():
        with Engine.load(str(path), device="cpu", max_batch_size=4) as engine:
            engine.generate("warm up", max_new_tokens=4)
            for wave in (1, 4):
                in_steps, lat_ms, step_ms, freed_steps = [], [], [], []
                for _ in range(args.trials):
                    latency, step, freed = _trial(engine, wave, rng.randint(3, 20))
                    in_steps.append(latency / step)
                    if freed is not None:
                        freed_steps.append(freed / step)
                    lat_ms.append(latency * 1000)
                    step_ms.append(step * 1000)
                rows.append(
                    [
                        size,
                        str(wave),
                        f"{statistics.median(step_ms):.2f}",
                        f"{statistics.median(lat_ms):.2f}",
                        f"{percentile(in_steps, 0.5):.2f}",
                        f"{percentile(in_steps, 0.95):.2f}",
                        f"{percentile(freed_steps, 0.95):.2f}" if freed_steps else "-",
                    ]
                )
    print_table(
        f"cancel() -> response, in decode steps ({args.trials} trials; goal p95 <= 1 step)",
        [
            "model",
            "wave rows",
            "step ms",
            "latency ms (p50)",
            "steps p50",
            "steps p95",
            "compute stopped, steps p95",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
