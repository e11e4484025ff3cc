# SPDX-License-Identifier: Apache-2.0
"""Multi-adapter serving, measured side by side in one run (ratios, medians of repeats).

1. one wave of 8 rows over 4 adapters vs one wave of 8 rows on a single adapter
   (throughput ratio; goal >= 0.85), and vs serving each adapter's 2 rows as its
   own batch, one batch after another; the base model's wave is shown for reference;
2. the same two waves on an engine with ``mixed_lora="peft"`` (PEFT's per-adapter
   loop instead of the fused path), so the fused path's gain is seen in the same run;
3. time from a finished training job to the first token of a request that uses the
   new adapter, vs the time to first token of the same request on an adapter that was
   already loaded.

Every request is forced to the same length (min_new_tokens = max_new_tokens). The
cases are timed in interleaved rounds (one of each per round), so a change in machine
load hits all of them alike.

    python benchmarks/bench_adapters.py [--size tiny|small|both] [--tokens 32] [--repeats 5]
        [--model smollm2-135m]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _bench_engine_common import (
    add_repeats_option,
    build_models,
    fail,
    interleaved,
    new_parser,
    run_benchmark,
)

PROMPTS = [
    "Tell me about rivers.",
    "What is a lantern?",
    "Describe a quiet morning.",
    "Why is the sky blue?",
    "Name three colours.",
    "How do bees talk?",
    "What is mp13?",
    "Write a short line.",
]


def make_adapters(model_path: Path, root: Path, n: int) -> list[Path]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = []
    for i in range(n):
        with torch.random.fork_rng():
            torch.manual_seed(100 + i)
            model = get_peft_model(
                AutoModelForCausalLM.from_pretrained(model_path),
                LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False),
            )
        model.save_pretrained(root / f"a{i}")
        out.append(root / f"a{i}")
    return out


def timed_rounds(cases: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each case, running one of each per round after a warm-up round."""
    return {name: t.median for name, t in interleaved(cases, repeats, warmup=1).items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--size",
        default="both",
        choices=["tiny", "small", "both"],
        help="which tiny test model(s) to measure, beside any --model (default both)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=32,
        help="new tokens forced per row (default 32); too few and a wave's first rows end "
        "before its last ones start, so the 8 rows never share a step",
    )
    add_repeats_option(parser, 5, "interleaved rounds of every case, after a warm-up round")
    run_benchmark(parser, measure_all, argv, quiet=True)


def measure_all(args) -> None:
    sizes = ["tiny", "small"] if args.size == "both" else [args.size]
    with tempfile.TemporaryDirectory() as tmp:
        built = build_models(Path(tmp), extra=args.model, sizes=sizes)
        for i, (label, model_path) in enumerate(built.items()):
            if i:
                print()
            run(label, model_path, args.tokens, args.repeats)


def run(size: str, model_path: Path | str, tokens: int, repeats: int) -> None:
    """Measure one model and print its table."""
    from mp13_engine import Engine, Request, TrainingConfig

    def req(i: int, adapters) -> Request:
        return Request(
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            adapters=adapters,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
        )

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = make_adapters(model_path, root, 4)
        with (
            # No prefix cache: the repeated waves must compute their prompts every time.
            Engine.load(str(model_path), device="cpu", prefix_cache_mb=0) as engine,
            Engine.load(
                str(model_path), device="cpu", prefix_cache_mb=0, mixed_lora="peft"
            ) as peft,
        ):
            names = [engine.adapters.load(d).name for d in dirs]
            for d in dirs:
                peft.adapters.load(d)
            mixed = [req(i, [names[i % 4]]) for i in range(8)]
            single = [req(i, [names[0]]) for i in range(8)]
            base = [req(i, []) for i in range(8)]
            per_adapter = [[r for r in mixed if r.adapters == (n,)] for n in names]

            def wave(on, requests):
                def run_wave():
                    out = on.generate_many(requests)
                    if not all(r.metrics.batch_size == len(requests) for r in out):
                        fail(
                            f"the wave of {len(requests)} rows did not run as one batch (most "
                            f"rows in a step: {max(r.metrics.batch_size for r in out)}), so "
                            f"it would not measure a mixed batch: with --tokens {tokens} the "
                            "first rows end before the last ones start; give more --tokens "
                            "(the default is 32)"
                        )

                return run_wave

            t = timed_rounds(
                {
                    "base": wave(engine, base),
                    "single": wave(engine, single),
                    "mixed": wave(engine, mixed),
                    "seq": lambda: [engine.generate_many(group) for group in per_adapter],
                    "peft_single": wave(peft, single),
                    "peft_mixed": wave(peft, mixed),
                },
                repeats,
            )

            rows = [
                {
                    "messages": [
                        {"role": "user", "content": p},
                        {"role": "assistant", "content": "ok"},
                    ]
                }
                for p in PROMPTS
            ]
            ttft_new, ttft_old = [], []
            for i in range(repeats):
                job = engine.train(
                    TrainingConfig(
                        adapter=f"fresh{i}",
                        dataset=rows,
                        max_steps=2,
                        output_dir=str(root / f"fresh{i}"),
                    )
                )
                job.result()
                t_done = time.perf_counter()
                stream = engine.stream(req(0, [f"fresh{i}"]))
                next(iter(stream))
                ttft_new.append(time.perf_counter() - t_done)
                for _ in stream:
                    pass
                t0 = time.perf_counter()
                stream = engine.stream(req(0, [names[1]]))
                next(iter(stream))
                ttft_old.append(time.perf_counter() - t0)
                for _ in stream:
                    pass

    new, old = statistics.median(ttft_new), statistics.median(ttft_old)
    print(f"model={size} tokens/row={tokens} repeats={repeats} (medians)")
    print(f"{'case':46}{'seconds':>10}{'ratio':>10}")
    t_single, t_mixed, t_seq = t["single"], t["mixed"], t["seq"]
    print(
        f"{'8 rows, base model only, one wave':46}{t['base']:>10.3f}"
        f"{t_single / t['base']:>10.2f}  (reference)"
    )
    print(f"{'8 rows, 1 adapter, one wave':46}{t_single:>10.3f}{1.0:>10.2f}")
    print(
        f"{'8 rows, 4 adapters, one wave (mixed batch)':46}{t_mixed:>10.3f}"
        f"{t_single / t_mixed:>10.2f}  throughput vs 1 adapter (goal >= 0.85)"
    )
    print(
        f"{'8 rows, 4 adapters, 4 batches one by one':46}{t_seq:>10.3f}"
        f"{t_single / t_seq:>10.2f}  throughput vs 1 adapter"
    )
    print(
        f"{'PEFT loop: 8 rows, 1 adapter, one wave':46}{t['peft_single']:>10.3f}"
        f"{t_single / t['peft_single']:>10.2f}"
    )
    print(
        f"{'PEFT loop: 8 rows, 4 adapters, one wave':46}{t['peft_mixed']:>10.3f}"
        f"{t_single / t['peft_mixed']:>10.2f}  ({t['peft_single'] / t['peft_mixed']:.2f} vs its "
        "own 1-adapter wave)"
    )
    print(
        f"{'fused mixed wave speed-up over PEFT loop':46}{'':>10}{t['peft_mixed'] / t_mixed:>10.2f}"
    )
    print(f"{'mixed wave speed-up over batch per adapter':46}{'':>10}{t_seq / t_mixed:>10.2f}")
    print(
        f"{'job finished -> first token, new adapter':46}{new:>10.4f}"
        f"{new / old:>10.2f}  vs first token on an already loaded adapter ({old:.4f} s)"
    )


if __name__ == "__main__":
    main()
