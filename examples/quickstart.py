# SPDX-License-Identifier: Apache-2.0
"""mp13 quickstart: load a model, chat, stream, run a batch, cancel, read metrics.

Run: ``python examples/quickstart.py`` (offline, a few seconds on CPU).

It builds a *tiny random-weight* model with ``mp13_engine.testing`` (a real
ChatML tokenizer and chat template, but untrained weights), so the replies are
gibberish by design: what this shows is the engine's machinery, not model
quality. Pass ``--model PATH`` to use a real local checkpoint instead: a folder (such as
the one ``mp13_engine.models.fetch("smollm2-135m")`` returns) or a GGUF file.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from mp13_engine import Engine, Request


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--model", help="a local model directory or GGUF file (default: build a tiny one)"
    )
    args = ap.parse_args()

    tmp = None
    if args.model is None:
        from mp13_engine.testing import build_tiny_model

        tmp = tempfile.TemporaryDirectory(prefix="mp13-quickstart-")
        t = time.perf_counter()
        args.model = str(build_tiny_model(tmp.name, family="chatml"))
        print(f"Built a tiny random-weight ChatML model offline in {time.perf_counter() - t:.1f}s")
        print("(its replies are meaningless on purpose: watch the lengths, ids and timings)\n")

    with Engine.load(args.model, device="cpu") as engine:
        print(f"Loaded {args.model} on {engine.device}; tool format: {engine.tool_format}")

        # 1. One chat request.
        messages = [{"role": "user", "content": "Hello! Who are you?"}]
        resp = engine.generate(Request(messages=messages, max_new_tokens=24))
        m = resp.metrics
        print("\n1. generate")
        print(f"   reply          : {resp.text!r}")
        why = {"length": "max_new_tokens=24 reached", "stop": "the model ended its reply"}
        reason = resp.finish_reason.value
        print(f"   finish reason  : {reason} ({why.get(reason, resp.error or '')})")
        print(
            f"   tokens         : {m.prompt_tokens} prompt -> {m.completion_tokens} new, "
            f"{m.tokens_per_s:.0f} tok/s"
        )
        print(f"   prompt fed     : {engine.count_tokens(engine.format_prompt(messages))} tokens")

        # 2. Streaming: chunks carry text deltas; the last one carries the Response.
        print("\n2. stream (each | separates a streamed chunk)")
        print("   ", end="")
        for chunk in engine.stream(Request(messages=messages, max_new_tokens=16)):
            print(chunk.text, end="|", flush=True)
            if chunk.done:
                print(
                    f"\n   last chunk done=True, ttft={chunk.response.metrics.ttft_s * 1000:.1f} ms"
                )

        # 3. Eight requests at once share one wave (one generate call).
        prompts = [f"Question {i}: what is {i} + {i}?" for i in range(8)]
        t = time.perf_counter()
        batch = engine.generate_many(
            [Request(messages=[{"role": "user", "content": p}], max_new_tokens=16) for p in prompts]
        )
        took = time.perf_counter() - t
        print("\n3. generate_many: 8 requests")
        print(
            f"   wave sizes     : {sorted({r.metrics.batch_size for r in batch})} "
            f"in {took * 1000:.0f} ms total"
        )

        # 4. Async twin and cancellation: a long request cancelled after a few tokens.
        async def cancel_demo() -> None:
            req = Request(messages=messages, max_new_tokens=1000)
            async for chunk in engine.astream(req):
                if chunk.text:
                    engine.cancel(req.id)
                if chunk.done:
                    r = chunk.response
                    print("\n4. astream + cancel")
                    print(
                        f"   finish reason  : {r.finish_reason.value} after "
                        f"{r.metrics.completion_tokens} tokens (partial text kept: {r.text!r})"
                    )

        asyncio.run(cancel_demo())

        # 5. Rolling metrics over recent requests.
        agg = engine.metrics()
        print("\n5. engine.metrics()")
        print(
            f"   {agg.requests} requests, {agg.completion_tokens} tokens, "
            f"{agg.throughput_tokens_per_s:.0f} tok/s overall"
        )
        print(
            f"   latency p50/p95: {agg.latency_p50_s * 1000:.0f}/"
            f"{agg.latency_p95_s * 1000:.0f} ms, TTFT p50: {agg.ttft_p50_s * 1000:.0f} ms"
        )
        print(f"   finish reasons : {agg.finish_reasons}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
