# SPDX-License-Identifier: Apache-2.0
"""Requests that arrive over time: the step loop against transformers' continuous batching.

Run: ``python benchmarks/bench_engine_arrivals.py [--quick] [--model smollm2-135m]``.
Every side gets the same prompt token ids and forced lengths (greedy,
``min_new_tokens = max_new_tokens``; transformers' side with ``eos_token_id=-1``),
one torch thread, and the sides alternate run by run (the order rotates each
repetition), so a busy machine slows both alike. The machine's load average is
printed before and after.

1. **Staggered**: a short request (8 tokens) arrives 0.2 s after a long one
   (200 tokens): the short one's latency ÷ its latency alone. Goal ≤ 1.3.
2. **Random arrivals**: 16 requests, lengths 8–128, exponential gaps (fixed
   seed), the same schedule for mp13, for mp13 with ``packed_steps=False`` (a
   step's prompt chunks and decode rows in separate forwards), and for
   transformers' continuous batching
   (``model.init_continuous_batching`` with ``num_blocks=32,
   max_batch_tokens=1024``: its defaults size the paged cache from RAM and are
   far slower on a CPU). Goal: mean latency ≤ 0.9×, p95 ≤ 1.0× transformers'.
3. **Conversation**: 40 turns; time to first token of each turn with the
   prefix cache and without it. Goal with the cache: turn 40 ≤ 2× turn 1.
4. **Memory**: 1,000 distinct two-turn conversations through a small prefix
   cache: the bytes it holds never pass its budget.
5. **Training**: the time per decoded token while a LoRA training job runs, ÷
   the same alone (decode steps and training steps take turns; neither starves).

``--quick`` shrinks every part (fewer requests, shorter lengths, one
repetition, only the tiny model) to check that the script works end to end.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import torch
from _bench_engine_common import (
    add_repeats_option,
    build_models,
    new_parser,
    percentile,
    print_table,
    run_benchmark,
)

from mp13_engine import Engine, Request, TrainingConfig

WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog",
    "while", "seven", "seas", "sail", "far", "away",
]  # fmt: skip


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


class Mp13Side:
    """The engine: submit prompt ids, wait for the futures, report finish times."""

    def __init__(self, engine: Engine, name: str = "mp13"):
        self.engine = engine
        self.name = name

    def submit(self, prompt: str, n: int) -> object:
        req = Request(prompt=prompt, max_new_tokens=n, min_new_tokens=n)
        fut = self.engine.submit(req)
        ended: list[float] = []
        # Timed when the response is in, whatever order the caller waits in.
        fut.add_done_callback(lambda _f: ended.append(time.perf_counter()))
        return fut, ended

    def wait(self, handles: list[object]) -> list[float]:
        """Finish time (perf_counter) of each handle, in order."""
        ends = []
        for fut, ended in handles:
            resp = fut.result(600)
            assert resp.ok, resp.error
            while not ended:  # the callback runs right after the result is set
                time.sleep(0.0001)
            ends.append(ended[0])
        return ends


class HFSide:
    """transformers' continuous batching manager, tuned for a CPU (see the module docstring)."""

    name = "transformers CB"

    def __init__(self, model, encode: Callable[[str], list[int]]):
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        self.encode = encode
        gen = GenerationConfig(max_new_tokens=16, do_sample=False, eos_token_id=-1, pad_token_id=0)
        cb = ContinuousBatchingConfig(num_blocks=32, max_batch_tokens=1024)
        self.manager = model.init_continuous_batching(
            generation_config=gen, continuous_batching_config=cb
        )
        self.manager.start()
        self.ends: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = False
        # Results are timed as they come out, whatever order the caller waits in.
        self._collector = threading.Thread(target=self._collect, daemon=True)
        self._collector.start()

    def _collect(self) -> None:
        while not self._stop:
            result = self.manager.get_result(timeout=0.05)
            if result is None or not result.is_finished():
                continue
            with self._cond:
                assert result.error is None, result.error
                self.ends[result.request_id] = time.perf_counter()
                self._cond.notify_all()

    def submit(self, prompt: str, n: int) -> str:
        return self.manager.add_request(self.encode(prompt), max_new_tokens=n, eos_token_id=-1)

    def wait(self, handles: list[str]) -> list[float]:
        with self._cond:
            if not self._cond.wait_for(lambda: set(handles) <= set(self.ends), timeout=600):
                raise AssertionError("transformers' continuous batching did not finish")
            return [self.ends.pop(h) for h in handles]

    def close(self) -> None:
        self._stop = True
        self._collector.join(5)
        self.manager.stop(block=True)


def _schedule(side, plan: list[tuple[float, str, int]]) -> list[float]:
    """Submit ``plan`` (arrival offset s, prompt, tokens) in real time; latencies in order."""
    start = time.perf_counter()
    handles, submitted = [], []
    for at, prompt, n in plan:
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        submitted.append(time.perf_counter())
        handles.append(side.submit(prompt, n))
    ends = side.wait(handles)
    return [e - s for s, e in zip(submitted, ends, strict=True)]


def staggered(sides, long_n: int, short_n: int, gap: float, repeats: int) -> list[list[str]]:
    rng = random.Random(1)
    long_prompt, short_prompt = _text(rng, 30), _text(rng, 8)
    ratios: dict[str, list[float]] = {s.name: [] for s in sides}
    for rep in range(repeats + 1):  # the first repetition warms up and is discarded
        order = sides if rep % 2 == 0 else list(reversed(sides))
        for side in order:
            alone = _schedule(side, [(0.0, short_prompt, short_n)])[0]
            both = _schedule(side, [(0.0, long_prompt, long_n), (gap, short_prompt, short_n)])
            if rep:
                ratios[side.name].append(both[1] / alone)
    return [
        [name, f"{statistics.median(r):.2f}", f"{min(r):.2f}", "<= 1.3"]
        for name, r in ratios.items()
    ]


def arrivals(sides, count: int, lengths: tuple[int, int], gap: float, repeats: int):
    rng = random.Random(7)
    plan, at = [], 0.0
    for _ in range(count):
        plan.append((at, _text(rng, rng.randrange(6, 40)), rng.randint(*lengths)))
        at += rng.expovariate(1.0 / gap)
    means: dict[str, list[float]] = {s.name: [] for s in sides}
    p95s: dict[str, list[float]] = {s.name: [] for s in sides}
    for rep in range(repeats + 1):
        order = sides if rep % 2 == 0 else list(reversed(sides))
        for side in order:
            lat = _schedule(side, plan)
            if rep:
                means[side.name].append(statistics.mean(lat))
                p95s[side.name].append(percentile(lat, 0.95))
    base = sides[-1].name
    rows = []
    for side in sides:
        mean, p95 = statistics.median(means[side.name]), statistics.median(p95s[side.name])
        rows.append(
            [
                side.name,
                f"{mean * 1000:.0f}",
                f"{p95 * 1000:.0f}",
                f"{mean / statistics.median(means[base]):.2f}",
                f"{p95 / statistics.median(p95s[base]):.2f}",
            ]
        )
    return rows


def conversation(path: str, turns: int, reply: int) -> list[list[str]]:
    rng = random.Random(3)
    with (
        Engine.load(path, device="cpu") as cached,
        Engine.load(path, device="cpu", prefix_cache_mb=0) as plain,
    ):
        # Short turns, so that 40 of them fit the small tiny model's 2,048-token window.
        history = [{"role": "system", "content": _text(rng, 20)}]
        ttft: dict[str, list[float]] = {"with cache": [], "without": []}
        for turn in range(turns):
            history.append({"role": "user", "content": _text(rng, rng.randrange(3, 8))})
            pairs = [("with cache", cached), ("without", plain)]
            if turn % 2:
                pairs.reverse()
            text = ""
            for name, engine in pairs:
                resp = engine.generate(
                    Request(messages=history, max_new_tokens=reply, min_new_tokens=reply)
                )
                assert resp.ok and resp.metrics.ttft_s is not None, resp.error
                ttft[name].append(resp.metrics.ttft_s)
                text = text or resp.text
            history.append({"role": "assistant", "content": text})
        saved = cached.metrics().prefix_cache
    rows = []
    for name, values in ttft.items():
        first = statistics.mean(values[:2])  # turn 1 (and 2: one warm-up disturbs a single run)
        rows.append(
            [
                name,
                f"{first * 1000:.1f}",
                f"{values[-1] * 1000:.1f}",
                f"{values[-1] / first:.2f}",
                "<= 2" if name == "with cache" else "",
            ]
        )
    rows.append(
        ["(cache)", f"hit rate {saved.hit_rate:.2f}", f"saved {saved.tokens_saved}", "", ""]
    )
    return rows


def memory(path: str, conversations: int, budget_mb: float) -> list[list[str]]:
    rng = random.Random(5)
    with Engine.load(path, device="cpu", prefix_cache_mb=budget_mb) as engine:
        peak = 0
        for c in range(conversations):
            history = [{"role": "user", "content": f"conversation {c}: " + _text(rng, 60)}]
            first = engine.generate(Request(messages=history, max_new_tokens=2))
            history += [
                {"role": "assistant", "content": first.text},
                {"role": "user", "content": _text(rng, 10)},
            ]
            engine.generate(Request(messages=history, max_new_tokens=2))
            peak = max(peak, engine.metrics().prefix_cache.bytes)
        stats = engine.metrics().prefix_cache
    return [
        [
            str(conversations),
            f"{stats.budget_bytes / 2**20:.1f}",
            f"{peak / 2**20:.2f}",
            str(stats.evicted_blocks),
            f"{stats.hit_rate:.2f}",
            "yes" if peak <= stats.budget_bytes else "NO",
        ]
    ]


def training(path: str, tokens: int, tmp: str) -> list[list[str]]:
    rows_data = [
        {
            "messages": [
                {"role": "user", "content": f"question {i}"},
                {"role": "assistant", "content": f"answer {i}"},
            ]
        }
        for i in range(8)
    ]

    def per_token(engine: Engine) -> float:
        r = engine.generate(
            Request(prompt="decode beside training", max_new_tokens=tokens, min_new_tokens=tokens)
        )
        return (r.metrics.total_s - r.metrics.ttft_s) / (tokens - 1)

    with Engine.load(path, device="cpu", prefix_cache_mb=0) as engine:
        per_token(engine)  # warm up
        alone = statistics.median(per_token(engine) for _ in range(3))
        job = engine.train(
            TrainingConfig(
                adapter="bench", dataset=rows_data, max_steps=100_000, batch_size=2, output_dir=tmp
            )
        )
        seen: list[float] = []  # when each optimizer step was reported

        def follow() -> None:
            for event in job.events():
                if event.kind == "step":
                    seen.append(time.perf_counter())

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        while not seen:  # training runs
            time.sleep(0.01)
        t0 = time.perf_counter()
        during = statistics.median(per_token(engine) for _ in range(3))
        t1 = time.perf_counter()
        job.cancel()
        job.result(timeout=600)
        follower.join(60)
    steps = sum(t0 <= t <= t1 for t in seen)
    return [
        [
            f"{alone * 1000:.2f}",
            f"{during * 1000:.2f}",
            f"{during / alone:.2f}",
            f"{steps / (t1 - t0):.1f}",
        ]
    ]


#: The parts of this benchmark, in the order they run (``--only``).
PARTS = ("staggered", "arrivals", "conversation", "memory", "training")


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and one repetition on the tiny model, to check the script works",
    )
    add_repeats_option(
        ap,
        5,
        "repetitions of the staggered and arrivals parts, sides alternating, after a "
        "warm-up (--quick runs 1)",
    )
    ap.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        default=[],
        help="run only this part (repeat for several); all parts by default",
    )
    ap.add_argument(
        "--no-tiny", action="store_true", help="only the --model models, not the tiny test model"
    )
    run_benchmark(ap, measure, argv, quiet=True)  # its training job wraps with PEFT


def measure(args) -> None:
    quick = args.quick
    repeats = 1 if quick else args.repeats
    parts = set(args.only or PARTS)
    sizes = () if args.no_tiny else ("tiny",) if quick else ("small",)
    for label, path in build_models(args.workdir, extra=args.model, sizes=sizes).items():
        path = str(path)
        if parts & {"staggered", "arrivals"}:
            _against_transformers(label, path, parts, quick, repeats)
        turns = 6 if quick else 40
        if "conversation" in parts:
            print_table(
                f"[{label}] a {turns}-turn conversation: time to first token (ms)",
                ["engine", "turn 1", f"turn {turns}", "last / first", "goal"],
                conversation(path, turns, reply=4 if quick else 8),
            )
        conversations = 60 if quick else 1000
        if "memory" in parts:
            print_table(
                f"[{label}] {conversations} distinct two-turn conversations through the "
                "prefix cache",
                ["conversations", "budget MiB", "peak MiB", "blocks evicted", "hit rate", "within"],
                memory(path, conversations, budget_mb=0.5 if quick else 8.0),
            )
        if "training" in parts:
            with tempfile.TemporaryDirectory() as tmp:
                print_table(
                    f"[{label}] decoding while a training job runs (ms per token)",
                    ["alone", "during training", "ratio", "training steps/s meanwhile"],
                    training(path, tokens=8 if quick else 64, tmp=tmp),
                )


def _against_transformers(label: str, path: str, parts: set[str], quick: bool, repeats: int):
    """The parts that run the same schedule on the engine and on transformers' batching."""
    from transformers import AutoModelForCausalLM

    # As many rows at once as the schedule sends: transformers' manager has no row cap here
    # (its max_batch_tokens=1024 holds all 16 requests).
    with (
        Engine.load(path, device="cpu", prefix_cache_mb=0, max_batch_size=16) as engine,
        Engine.load(
            path, device="cpu", prefix_cache_mb=0, max_batch_size=16, packed_steps=False
        ) as unpacked,
    ):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        hf = HFSide(model, engine._state.tokens.encode)
        sides = [Mp13Side(engine), Mp13Side(unpacked, "mp13 unpacked"), hf]
        try:
            if "staggered" in parts:
                long_n = 40 if quick else 200
                gap = 0.05 if quick else 0.2
                print_table(
                    f"[{label}] staggered: short (8 tokens) {gap} s after a long one "
                    f"({long_n}); short latency / alone",
                    ["side", "ratio (median)", "ratio (best)", "goal"],
                    staggered(sides, long_n=long_n, short_n=8, gap=gap, repeats=repeats),
                )
            if "arrivals" in parts:
                count = 6 if quick else 16
                print_table(
                    f"[{label}] random arrivals: {count} requests, same schedule; ratio to "
                    "transformers' continuous batching (goal mean <= 0.9, p95 <= 1.0)",
                    ["side", "mean ms", "p95 ms", "mean ratio", "p95 ratio"],
                    arrivals(
                        sides,
                        count,
                        (4, 24) if quick else (8, 128),
                        gap=0.02 if quick else 0.1,
                        repeats=repeats,
                    ),
                )
        finally:
            hf.close()


if __name__ == "__main__":
    main()
