# SPDX-License-Identifier: Apache-2.0
"""Engine overhead: one request of 64 forced new tokens, engine vs raw ``model.generate``.

Run: ``python benchmarks/bench_engine_overhead.py``. Same model object, same
prompt ids, greedy, ``min_new_tokens = max_new_tokens = 64``. Goal: ratio ≤ 1.05.

A second table puts the same request with 10,000 stop strings (a word list that
never matches, so all 64 tokens are decoded) beside it without any: the decode rate
(tokens after the first over the time after the first, from ``RequestMetrics``) with
the list over the rate without. Goal: ≥ 0.95 (many stops must not slow a token). Its
last column is the whole request's time without the list over with it: that also
counts what a list costs once per request (checking it, indexing it), not a goal.
"""

from __future__ import annotations

import random
import statistics
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
STOPS = 10_000


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    add_repeats_option(ap, 15, INTERLEAVED_RUNS)
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
    rows, stop_rows = [], []
    words = _word_list()
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

        rates: dict[str, list[float]] = {"none": [], "many": []}

        def with_stops(engine=engine, stop=(), side="none", rates=rates):
            r = engine.generate(
                Request(
                    messages=[{"role": "user", "content": "Tell me about the engine."}],
                    max_new_tokens=NEW,
                    min_new_tokens=NEW,
                    stop=stop,
                )
            )
            m = r.metrics
            assert m.completion_tokens == NEW and m.ttft_s is not None, r
            rates[side].append((NEW - 1) / (m.total_s - m.ttft_s))

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
        stopped = interleaved(
            {"none": with_stops, "many": lambda f=with_stops, w=words: f(stop=w, side="many")},
            args.repeats,
        )
        none_t, many_t = stopped["none"], stopped["many"]
        # The warm-up runs' rates are left out, as their times are.
        none_r = statistics.median(rates["none"][-args.repeats :])
        many_r = statistics.median(rates["many"][-args.repeats :])
        stop_rows.append(
            [
                size,
                f"{none_r:.0f}",
                f"{many_r:.0f}",
                f"{many_r / none_r:.3f}",
                f"{none_t.median / many_t.median:.3f}",
            ]
        )
    print_table(
        f"engine overhead, 1 request x {NEW} forced tokens ({args.repeats} interleaved runs; "
        "goal <= 1.05)",
        ["model", "raw ms (median)", "engine ms (median)", "ratio (median)", "ratio (best)"],
        rows,
    )
    print_table(
        f"stop strings, 1 request x {NEW} forced tokens with {STOPS:,} stop strings vs none "
        f"({args.repeats} interleaved runs, medians; goal decode rate ratio >= 0.95)",
        [
            "model",
            "decode tok/s, none",
            f"decode tok/s, {STOPS:,}",
            "decode rate ratio",
            "whole request, none / with",
        ],
        stop_rows,
    )


def _word_list() -> list[str]:
    """``STOPS`` words of 3 to 12 letters, each ending in a character these replies do not
    hold (so none ends the reply, and every letter may start one: the held text is busy)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) + "\u2603"
        for _ in range(STOPS)
    ]


if __name__ == "__main__":
    main()
