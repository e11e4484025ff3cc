# SPDX-License-Identifier: Apache-2.0
"""Concurrency: 8 separate requests submitted at once, engine vs raw sequential vs raw static batch.

Run: ``python benchmarks/bench_engine_concurrency.py``. Eight threads each call
``engine.generate`` at the same moment (a barrier), and separately eight
``agenerate`` tasks are gathered on one event loop; the baselines are eight
``model.generate`` calls one after another, and one left-padded
``model.generate`` over all eight prompts. Every request is forced to 32 new
tokens. Goal: engine ≤ 1.3× the static batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from _bench_engine_common import (
    INTERLEAVED_RUNS,
    add_repeats_option,
    interleaved,
    new_parser,
    print_table,
    prompt_ids,
    raw_generate,
    run_benchmark,
    uncached_engines,
)

from mp13_engine import Request

N = 8
NEW = 32


def _texts() -> list[str]:
    return [f"Question {i}: " + "tell me more " * (i + 1) for i in range(N)]


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    add_repeats_option(ap, 10, INTERLEAVED_RUNS)
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
    rows = []
    for size, engine in uncached_engines(args.workdir, args.model, max_batch_size=N):
        texts = _texts()
        ids = [prompt_ids(engine, t) for t in texts]
        pad = engine._state.pad_id
        model = engine.model
        sizes: list[int] = []

        def sequential(model=model, ids=ids, pad=pad):
            for r in ids:
                raw_generate(model, [r], pad, max_new_tokens=NEW, min_new_tokens=NEW)

        def static(model=model, ids=ids, pad=pad):
            raw_generate(model, ids, pad, max_new_tokens=NEW, min_new_tokens=NEW)

        def concurrent(engine=engine, texts=texts, sizes=sizes):
            barrier = threading.Barrier(N)
            out = [None] * N

            def one(i):
                barrier.wait()
                out[i] = engine.generate(
                    Request(
                        messages=[{"role": "user", "content": texts[i]}],
                        max_new_tokens=NEW,
                        min_new_tokens=NEW,
                    )
                )

            threads = [threading.Thread(target=one, args=(i,)) for i in range(N)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(r.metrics.completion_tokens == NEW for r in out)
            sizes.append(max(r.metrics.batch_size for r in out))

        async_sizes: list[int] = []

        def gathered(engine=engine, texts=texts, sizes=async_sizes):
            async def run():
                return await asyncio.gather(
                    *(
                        engine.agenerate(
                            Request(
                                messages=[{"role": "user", "content": t}],
                                max_new_tokens=NEW,
                                min_new_tokens=NEW,
                            )
                        )
                        for t in texts
                    )
                )

            out = asyncio.run(run())
            sizes.append(max(r.metrics.batch_size for r in out))

        t = interleaved(
            {
                "sequential": sequential,
                "static": static,
                "threads": concurrent,
                "asyncio": gathered,
            },
            args.repeats,
        )
        seq, sta = t["sequential"], t["static"]
        for mode, wave_sizes in (("threads", sizes), ("asyncio", async_sizes)):
            eng = t[mode]
            rows.append(
                [
                    size,
                    mode,
                    f"{sta.median * 1000:.0f}",
                    f"{eng.median * 1000:.0f}",
                    f"{seq.median * 1000:.0f}",
                    f"{eng.median / sta.median:.2f} ({eng.best / sta.best:.2f})",
                    f"{eng.median / seq.median:.2f} ({eng.best / seq.best:.2f})",
                    f"{sorted(wave_sizes)[len(wave_sizes) // 2]}",
                ]
            )
    print_table(
        f"{N} concurrent requests x {NEW} tokens ({args.repeats} interleaved runs; ratios: "
        "median (best); goal engine/static <= 1.3)",
        [
            "model",
            "submitted by",
            "static ms",
            "engine ms",
            "sequential ms",
            "engine/static",
            "engine/sequential",
            "median wave size",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
