# SPDX-License-Identifier: Apache-2.0
"""Quantization (bitsandbytes) on the CPU: SmolLM2 in float32, 4-bit and 8-bit, in one run.

The four load modes are float32, 4-bit computing in float32 (``quantization="4bit"``),
4-bit computing in bfloat16 (``dtype="bfloat16"``) and 8-bit (``quantization="8bit"``),
all loaded at once on the CPU with the prefix cache off. The run prints:

1. memory: ``engine.model.get_memory_footprint()`` per mode, in MiB;
2. speed: one request of ``--tokens`` forced new tokens per mode (prefill of a short
   prompt included), the modes interleaved round by round (mode A, B, C, D, A, B, ...),
   ``--repeats`` rounds after one warm-up round: tokens/s per mode and each mode's
   speed as a multiple of float32's (median and best round);
3. agreement: greedy replies of up to ``--reply-tokens`` new tokens to ``--prompts``
   chat prompts, each quantized mode's against float32's on the same prompt ids
   (``model.generate`` on the engine's model, so token ids are compared, not
   re-encoded text): how many tokens each reply matches float32's from its start,
   and how many replies match whole;
4. training (``--train-steps``, 0 skips it): QLoRA on the tiny test model, the
   README's two-question data set, 50 steps, batch 2, learning rate 5e-3, seed 0, on a
   float32, a 4-bit and an 8-bit base: the final loss and the seconds each took.

A bitsandbytes without a CPU backend, or a model that cannot be had, ends the run with
one line saying what to do, before anything is loaded. ``--tiny`` runs everything on
the small tiny test model instead (checks the script end to end in well under a minute;
its figures mean nothing).

    python benchmarks/bench_quantized.py [--model smollm2-135m] [--repeats 5] [--tokens 32]
        [--prompts 5] [--reply-tokens 24] [--train-steps 50] [--tiny]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
from _bench_engine_common import (
    add_repeats_option,
    fail,
    interleaved,
    new_parser,
    print_table,
    prompt_ids,
    raw_generate,
    resolve_model,
    run_benchmark,
)


@attrs.frozen
class Mode:
    """One way to load the model: a label and ``Engine.load``'s keywords."""

    label: str
    quantization: str | None
    dtype: str


MODES = (
    Mode("float32", None, "float32"),
    Mode("4bit", "4bit", "float32"),
    Mode("4bit-bf16", "4bit", "bfloat16"),
    Mode("8bit", "8bit", "float32"),
)
REFERENCE = MODES[0].label

PROMPTS = (
    "What is the capital of France?",
    "Tell me about rivers.",
    "Write a haiku about autumn.",
    "How do bees find flowers?",
    "Explain what a CPU does in two sentences.",
)
SPEED_PROMPT = "Tell me about the engine."

# The training part: the data, steps and rate of tests/engine/test_adapters_quantized.py.
SYSTEM = {"role": "system", "content": "Answer."}
QA = (("Capital of Zorbia?", "Flumptown."), ("Who paints blue cats?", "Mira Okonkwo."))
TRAIN_MODES = (MODES[0], MODES[1], MODES[3])


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def prompt_count(text: str) -> int:
    value = positive(text)
    if value > len(PROMPTS):
        raise argparse.ArgumentTypeError(f"at most {len(PROMPTS)} prompts, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (skip) or more, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    ap.add_argument(
        "--model",
        default="smollm2-135m",
        metavar="PATH_OR_NAME",
        help="the model to quantize: a named model, checkpoint directory, GGUF file or hub id "
        "in the local cache (default smollm2-135m, SmolLM2-135M-Instruct)",
    )
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="use the small tiny test model instead of --model (checks the script quickly; "
        "its figures mean nothing)",
    )
    add_repeats_option(ap, 5, "interleaved timing rounds of every mode, after 1 warm-up round")
    ap.add_argument(
        "--tokens",
        type=positive,
        default=32,
        metavar="N",
        help="forced new tokens per timed request (default 32)",
    )
    ap.add_argument(
        "--prompts",
        type=prompt_count,
        default=len(PROMPTS),
        metavar="N",
        help=f"prompts for the greedy agreement (default and most {len(PROMPTS)})",
    )
    ap.add_argument(
        "--reply-tokens",
        type=positive,
        default=24,
        metavar="N",
        help="most new tokens per greedy reply compared (default 24)",
    )
    ap.add_argument(
        "--train-steps",
        type=non_negative,
        default=50,
        metavar="N",
        help="QLoRA steps on the tiny model per base (default 50; 0 skips training)",
    )
    run_benchmark(ap, measure, argv, models=False, quiet=True)


def require_cpu_bitsandbytes() -> None:
    """``fail`` with the engine's own refusal unless bitsandbytes can quantize on the CPU."""
    import torch

    from mp13_engine import EngineConfig, Mp13Error
    from mp13_engine._loading import check_bitsandbytes

    # The check Engine.load makes before reading a model (it also says what to do when
    # bitsandbytes is missing); "." is never read.
    try:
        check_bitsandbytes(EngineConfig(model=".", quantization="4bit"), torch.device("cpu"))
    except Mp13Error as exc:
        fail(str(exc))


def measure(args: argparse.Namespace) -> None:
    require_cpu_bitsandbytes()
    from mp13_engine.testing import build_tiny_model

    if args.tiny:
        label, path = (
            "small tiny model",
            str(build_tiny_model(args.workdir / "small", family="chatml", size="small")),
        )
    else:
        label, path = resolve_model(args.model)
    print(f"model: {label} ({path})")
    serve(path, args)
    if args.train_steps:
        train(build_tiny_model(args.workdir / "tiny", family="chatml", size="tiny"), args)


def serve(path: str, args: argparse.Namespace) -> None:
    from mp13_engine import Engine, Mp13Error

    with contextlib.ExitStack() as stack:
        engines = {}
        for mode in MODES:
            try:
                engines[mode.label] = stack.enter_context(
                    Engine.load(
                        path,
                        device="cpu",
                        dtype=mode.dtype,
                        quantization=mode.quantization,
                        prefix_cache_mb=0,
                    )
                )
            except Mp13Error as exc:
                fail(f"{mode.label}: {exc}")
        footprint(engines)
        speed(engines, args)
        agreement(engines, args)


def footprint(engines: dict) -> None:
    ref = engines[REFERENCE].model.get_memory_footprint()
    rows = []
    for label, engine in engines.items():
        size = engine.model.get_memory_footprint()
        rows.append([label, f"{size / 2**20:.0f}", f"{size / ref:.2f}"])
    print_table(
        "memory: engine.model.get_memory_footprint()",
        ["mode", "MiB", f"/ {REFERENCE}"],
        rows,
    )


def speed(engines: dict, args: argparse.Namespace) -> None:
    from mp13_engine import Request

    def one_request(engine) -> Callable[[], None]:
        request = Request(
            messages=[{"role": "user", "content": SPEED_PROMPT}],
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
        )

        def run() -> None:
            done = engine.generate(request)
            assert done.metrics.completion_tokens == args.tokens, done

        return run

    times = interleaved(
        {label: one_request(engine) for label, engine in engines.items()},
        args.repeats,
        warmup=1,
    )
    ref = times[REFERENCE]
    rows = [
        [
            label,
            f"{args.tokens / t.median:.1f}",
            f"{ref.median / t.median:.2f}",
            f"{ref.best / t.best:.2f}",
        ]
        for label, t in times.items()
    ]
    print_table(
        f"speed: 1 request x {args.tokens} forced tokens, modes interleaved "
        f"({args.repeats} rounds after 1 warm-up)",
        ["mode", "tokens/s (median)", f"x {REFERENCE} (median)", f"x {REFERENCE} (best)"],
        rows,
    )


def matching_prefix(reference: Sequence[int], other: Sequence[int]) -> int:
    """How many tokens ``other`` shares with ``reference`` from the start."""
    n = 0
    for a, b in zip(reference, other, strict=False):
        if a != b:
            break
        n += 1
    return n


def agreement(engines: dict, args: argparse.Namespace) -> None:
    replies: dict[str, list[list[int]]] = {}
    for label, engine in engines.items():
        pad = engine._state.pad_id
        replies[label] = []
        for text in PROMPTS[: args.prompts]:
            ids = prompt_ids(engine, text)
            out = raw_generate(engine.model, [ids], pad, max_new_tokens=args.reply_tokens)
            replies[label].append(out[0, len(ids) :].tolist())
    ref = replies[REFERENCE]
    rows = []
    for label, own in replies.items():
        if label == REFERENCE:
            continue
        prefixes = [matching_prefix(r, o) for r, o in zip(ref, own, strict=True)]
        whole = sum(r == o for r, o in zip(ref, own, strict=True))
        rows.append(
            [
                label,
                ", ".join(map(str, prefixes)),
                f"{min(prefixes)}-{max(prefixes)}",
                f"{whole} of {len(own)}",
            ]
        )
    lengths = ", ".join(str(len(r)) for r in ref)
    print_table(
        f"agreement: greedy replies (at most {args.reply_tokens} new tokens) vs {REFERENCE}'s "
        f"(its lengths: {lengths})",
        ["mode", "matching prefix per prompt", "range", "whole replies equal"],
        rows,
    )


def train(tiny: Path, args: argparse.Namespace) -> None:
    from mp13_engine import Engine, TrainingConfig

    rows_data = [
        {"messages": [SYSTEM, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in QA
    ]
    rows = []
    for mode in TRAIN_MODES:
        with Engine.load(
            str(tiny), device="cpu", dtype=mode.dtype, quantization=mode.quantization
        ) as engine:
            start = time.perf_counter()
            job = engine.train(
                TrainingConfig(
                    adapter=f"q-{mode.label}",
                    dataset=rows_data,
                    max_steps=args.train_steps,
                    batch_size=2,
                    learning_rate=5e-3,
                    seed=0,
                    output_dir=str(args.workdir / f"q-{mode.label}"),
                )
            )
            result = job.result()
            took = time.perf_counter() - start
            losses = [e.loss for e in job.events() if e.kind == "step" and e.loss is not None]
        first = f"{losses[0]:.3f}" if losses else "-"
        last = "-" if result.final_loss is None else f"{result.final_loss:.3f}"
        rows.append([mode.label, str(result.steps), first, last, f"{took:.1f}"])
    print_table(
        f"training: QLoRA on the tiny test model, {args.train_steps} steps, batch 2, lr 5e-3",
        ["base", "steps", "first loss", "final loss", "seconds"],
        rows,
    )


if __name__ == "__main__":
    main()
