# SPDX-License-Identifier: Apache-2.0
"""Engine overhead: one request of 64 forced new tokens, engine vs raw ``model.generate``.

Run: ``python benchmarks/bench_engine_overhead.py``. Same model object, same
prompt ids, greedy, ``min_new_tokens = max_new_tokens = 64``. Goal: ratio ≤ 1.05.
"""

from __future__ import annotations

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

NEW = 64


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    add_repeats_option(ap, 15, INTERLEAVED_RUNS)
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
    rows = []
    for size, engine in uncached_engines(args.workdir, args.model):
        ids = prompt_ids(engine, "Tell me about the engine.")
        pad = engine._state.pad_id
        model = engine.model

        def raw(model=model, ids=ids, pad=pad):
            out = raw_generate(model, [ids], pad, max_new_tokens=NEW, min_new_tokens=NEW)
            assert out.shape[1] - len(ids) == NEW

        def eng(engine=engine):
            r = engine.generate(
                Request(
                    messages=[{"role": "user", "content": "Tell me about the engine."}],
                    max_new_tokens=NEW,
                    min_new_tokens=NEW,
                )
            )
            assert r.metrics.completion_tokens == NEW, r

        med = interleaved({"raw": raw, "engine": eng}, args.repeats)
        raw_t, eng_t = med["raw"], med["engine"]
        rows.append(
            [
                size,
                f"{raw_t.median * 1000:.1f}",
                f"{eng_t.median * 1000:.1f}",
                f"{eng_t.median / raw_t.median:.3f}",
                f"{eng_t.best / raw_t.best:.3f}",
            ]
        )
    print_table(
        f"engine overhead, 1 request x {NEW} forced tokens ({args.repeats} interleaved runs; "
        "goal <= 1.05)",
        ["model", "raw ms (median)", "engine ms (median)", "ratio (median)", "ratio (best)"],
        rows,
    )


if __name__ == "__main__":
    main()
