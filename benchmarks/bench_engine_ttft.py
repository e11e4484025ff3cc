# SPDX-License-Identifier: Apache-2.0
"""Streaming time to first token: engine vs raw ``transformers``.

Run: ``python benchmarks/bench_engine_ttft.py``. Engine: from calling
``engine.stream(...)`` (chat messages in, template rendering included) to the
first streamed ``Chunk`` with text. Raw: ``model.generate`` with a
``TextIteratorStreamer`` on pre-rendered, pre-tokenized ids, from the call to
the first text the streamer yields (``skip_prompt=True``). Also shown: raw
one-token ``generate`` (prefill + one step, no streaming machinery).

Second table, the first request after loading vs the later ones: each side runs
in a fresh process (nothing of torch warmed up yet), loads the model, then times
its first request and ``--repeats`` later ones, the same prompt each time (prefix
cache off). The raw side's time here includes rendering the chat template and
tokenizing, as the engine's does. A first/later ratio near 1 on both sides means
loading leaves no warm-up for the first request to pay.

Third table, the first two turns of a conversation as the REPL asks them
(``mp13_context`` with the toolbox's builtin tools, prefix cache on, a freshly
loaded engine each time): turn 1 computes the whole prompt (system prompt and the
tools' descriptions); turn 2 takes that from the prefix cache. ``tok/s`` is what
the REPL's footer shows (``RequestMetrics.tokens_per_s``: prefill included).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pathlib
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from _bench_engine_common import (
    INTERLEAVED_RUNS,
    add_repeats_option,
    build_models,
    interleaved,
    new_parser,
    print_table,
    prompt_ids,
    run_benchmark,
    uncached_engines,
)

from mp13_engine import Request

TEXT = "Tell me something about streaming."
MESSAGES = [{"role": "user", "content": TEXT}]
#: The conversation table's turns (16 tokens each, as in the other tables).
TURNS = ("What is the capital of France?", "And of Germany?")
#: Fresh engines the conversation table loads per model (at most; fewer with --repeats).
CONVERSATIONS = 3


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    add_repeats_option(ap, 20, INTERLEAVED_RUNS)
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
    side_by_side(args)
    # Built (or resolved) once for both tables; side_by_side's engines load their own.
    models = build_models(args.workdir / "fresh", args.model)
    first_vs_later(args, models)
    conversation_turns(args, models)


def side_by_side(args) -> None:
    rows = []
    for size, engine in uncached_engines(args.workdir, args.model):
        import torch
        from transformers import TextIteratorStreamer

        model, tok = engine.model, engine.tokenizer
        ids = torch.tensor([prompt_ids(engine, TEXT)])
        mask = torch.ones_like(ids)
        pad = engine._state.pad_id
        firsts: dict[str, list[float]] = {"engine": [], "streamer": []}

        def eng(engine=engine, firsts=firsts):
            t0 = time.perf_counter()
            stream = engine.stream(
                Request(
                    messages=[{"role": "user", "content": TEXT}],
                    max_new_tokens=16,
                    min_new_tokens=16,
                )
            )
            for chunk in stream:
                if chunk.text:
                    firsts["engine"].append(time.perf_counter() - t0)
                    break
            stream.close()
            stream.result()

        def streamer(model=model, tok=tok, ids=ids, mask=mask, pad=pad, firsts=firsts):
            s = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
            t0 = time.perf_counter()
            th = threading.Thread(
                target=model.generate,
                kwargs={
                    "input_ids": ids,
                    "attention_mask": mask,
                    "max_new_tokens": 16,
                    "min_new_tokens": 16,
                    "do_sample": False,
                    "pad_token_id": pad,
                    "streamer": s,
                },
            )
            th.start()
            for text in s:
                if text:
                    firsts["streamer"].append(time.perf_counter() - t0)
                    break
            for _ in s:  # drain so the generate thread ends
                pass
            th.join()

        def one_token(model=model, ids=ids, mask=mask, pad=pad):
            with torch.inference_mode():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=1,
                    do_sample=False,
                    pad_token_id=pad,
                )

        t = interleaved({"engine": eng, "streamer": streamer, "one_token": one_token}, args.repeats)
        e = statistics.median(firsts["engine"][2:] or firsts["engine"])
        r = statistics.median(firsts["streamer"][2:] or firsts["streamer"])
        one = t["one_token"].median
        rows.append(
            [
                size,
                f"{one * 1000:.1f}",
                f"{r * 1000:.1f}",
                f"{e * 1000:.1f}",
                f"{e / r:.2f}",
                f"{e / one:.2f}",
            ]
        )
    print_table(
        f"time to first streamed text (median of {args.repeats} interleaved runs)",
        [
            "model",
            "raw 1-token ms",
            "raw streamer ms",
            "engine ms",
            "engine/streamer",
            "engine/1-token",
        ],
        rows,
    )


def first_vs_later(args, models: dict[str, pathlib.Path | str]) -> None:
    """The first request after loading vs the later ones, each side in a fresh process."""
    import torch

    threads = torch.get_num_threads()  # measuring() pinned it; a child starts unpinned
    rows = []
    for label, path in models.items():
        row = [label]
        firsts = []
        for side in (_engine_firsts, _raw_firsts):
            first, *later = in_fresh_process(side, str(path), args.repeats, threads)
            median = statistics.median(later)
            row += [f"{first * 1000:.1f}", f"{median * 1000:.1f}", f"{first / median:.2f}"]
            firsts.append(first)
        row.append(f"{firsts[0] / firsts[1]:.2f}")
        rows.append(row)
    print_table(
        f"first request after loading vs later ones (median of {args.repeats}), "
        "time to first streamed text, each side in a fresh process",
        [
            "model",
            "engine 1st ms",
            "engine later ms",
            "engine 1st/later",
            "raw 1st ms",
            "raw later ms",
            "raw 1st/later",
            "1st engine/raw",
        ],
        rows,
    )


def in_fresh_process(fn: Callable[..., list[float]], *args: Any) -> list[float]:
    """``fn(*args)`` in a new interpreter (spawned: no torch state inherited)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()


def _engine_firsts(path: str, repeats: int, threads: int) -> list[float]:
    """Seconds to the first streamed text of the first request after ``Engine.load``,
    then of ``repeats`` more (in a fresh process)."""
    import torch

    from mp13_engine import Engine
    from mp13_engine._compat import no_progress_bars

    torch.set_num_threads(threads)
    with no_progress_bars(), Engine.load(path, device="cpu", prefix_cache_mb=0) as engine:
        return [_engine_first_text(engine) for _ in range(1 + repeats)]


def _engine_first_text(engine) -> float:
    t0 = time.perf_counter()
    stream = engine.stream(Request(messages=MESSAGES, max_new_tokens=16, min_new_tokens=16))
    first = 0.0
    for chunk in stream:
        if chunk.text:
            first = time.perf_counter() - t0
            break
    stream.close()
    stream.result()
    return first


def _raw_firsts(path: str, repeats: int, threads: int) -> list[float]:
    """``_engine_firsts`` for raw ``transformers``: template, tokenizer, streamer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mp13_engine._compat import no_progress_bars

    torch.set_num_threads(threads)
    with no_progress_bars():
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return [_raw_first_text(model, tok) for _ in range(1 + repeats)]


def _raw_first_text(model, tok) -> float:
    from transformers import TextIteratorStreamer

    t0 = time.perf_counter()
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    s = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
    kwargs = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}
    th = threading.Thread(
        target=model.generate, kwargs={**enc, **kwargs, "pad_token_id": pad, "streamer": s}
    )
    th.start()
    first = 0.0
    for piece in s:
        if piece and not first:
            first = time.perf_counter() - t0
    th.join()
    return first


def conversation_turns(args, models: dict[str, pathlib.Path | str]) -> None:
    """Turn 1 vs turn 2 of a conversation with the builtin tools, as the REPL asks."""
    from mp13_context import ChatContext, Session
    from mp13_engine import Engine
    from mp13_toolbox import Toolbox

    rows = []
    runs = max(1, min(CONVERSATIONS, args.repeats))
    for label, path in models.items():
        turns: list[list[Any]] = [[], []]
        for _ in range(runs):
            with Engine.load(str(path), device="cpu") as engine:
                ctx = ChatContext(
                    Session.open(":memory:"), engine=engine, toolbox=Toolbox(builtins=True)
                )
                cur = ctx.cursor()
                for i, text in enumerate(TURNS):
                    turns[i].append(cur.ask(text, max_new_tokens=16, min_new_tokens=16).metrics)
        row = [label]
        for metrics in turns:
            m = metrics[0]
            row += [
                f"{m.prompt_tokens} ({m.cached_tokens})",
                f"{statistics.median(x.ttft_s for x in metrics) * 1000:.1f}",
                f"{statistics.median(x.tokens_per_s for x in metrics):.1f}",
            ]
        first, second = (statistics.median(x.ttft_s for x in m) for m in turns)
        row.append(f"{first / second:.2f}")
        rows.append(row)
    print_table(
        f"a conversation's first two turns with the builtin tools (median of {runs} "
        "freshly loaded engines, prefix cache on)",
        [
            "model",
            "turn 1 prompt (cached)",
            "turn 1 ms to 1st token",
            "turn 1 tok/s",
            "turn 2 prompt (cached)",
            "turn 2 ms to 1st token",
            "turn 2 tok/s",
            "turn 1/turn 2",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
