# SPDX-License-Identifier: Apache-2.0
"""Streaming time to first token: engine vs raw ``transformers``.

Run: ``python benchmarks/bench_engine_ttft.py``. Engine: from calling
``engine.stream(...)`` (chat messages in, template rendering included) to the
first streamed ``Chunk`` with text. Raw: ``model.generate`` with a
``TextIteratorStreamer`` on pre-rendered, pre-tokenized ids, from the call to
the first text the streamer yields (``skip_prompt=True``). Also shown: raw
one-token ``generate`` (prefill + one step, no streaming machinery).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from _bench_engine_common import (
    INTERLEAVED_RUNS,
    add_repeats_option,
    interleaved,
    new_parser,
    print_table,
    prompt_ids,
    run_benchmark,
    uncached_engines,
)

from mp13_engine import Request

TEXT = "Tell me something about streaming."


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    add_repeats_option(ap, 20, INTERLEAVED_RUNS)
    run_benchmark(ap, measure, argv)


def measure(args) -> None:
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
        import statistics

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


if __name__ == "__main__":
    main()
