# SPDX-License-Identifier: Apache-2.0
"""Tool-call parser cost: streaming cost per token vs a decode step, and whole-text throughput.

Run: ``python benchmarks/bench_toolcalls.py``.

(a) For every format, a realistic reply (text, reasoning where the format has
it, two tool calls) is tokenized with the ``small`` tiny test model's tokenizer
and fed token by token to a ``StreamParser`` (construction and ``finish``
included). Its cost per token is divided by the median time of one decode step
of the same model (a plain HF forward of one token with a KV cache), measured
in the same run, interleaved. Goal: <= 2%.

(b) Whole-text ``parse`` of a long output with many calls: MB/s and calls/s,
and the ratio to ``json.loads`` of just the calls' JSON (the floor any parser
pays).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import tempfile
import time
from collections.abc import Sequence

import torch
from _bench_engine_common import (
    add_repeats_option,
    build_models,
    new_parser,
    run_benchmark,
)
from transformers import AutoModelForCausalLM, AutoTokenizer

from mp13_engine import toolcalls
from mp13_engine._compat import cache_argument
from mp13_toolbox import ToolCall

CALLS = [
    ToolCall("get_weather", {"city": "Paris", "days": 3, "units": "metric"}),
    ToolCall(
        "search",
        {"query": "naïve café 東京", "filters": {"tags": ["a", "b"], "limit": 10}, "exact": False},
    ),
]


def reply(fmt: str) -> str:
    profile = toolcalls.get_profile(fmt)
    text = "Let me check the weather and search for the café before answering.\n"
    if profile.reasoning:
        open_tag, close_tag = profile.reasoning[0]
        text = (
            f"{open_tag}The user wants weather and a search. I will call both.{close_tag}\n" + text
        )
    return text + toolcalls.render_calls(CALLS, fmt) + "\nDone."


def token_deltas(tok, text: str) -> list[str]:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out, prev = [], ""
    for i in range(len(ids)):
        cur = tok.decode(ids[: i + 1])
        if cur.endswith("\ufffd") or not cur.startswith(prev):
            continue  # an incomplete UTF-8 sequence: a streamer waits for the next token
        out.append(cur[len(prev) :])
        prev = cur
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def decode_step_s(model, steps: int, device: str) -> float:
    ids = torch.arange(5, 37, device=device).unsqueeze(0)
    # The forward's own name for the cache: "cache" since transformers 5.24 deprecated
    # "past_key_values" (removed in 5.40); earlier releases take only the old name.
    name = cache_argument(model)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past = out[name]
        nxt = out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(steps):
            _sync(device)
            t0 = time.perf_counter()
            out = model(input_ids=nxt, use_cache=True, **{name: past})
            _sync(device)
            times.append(time.perf_counter() - t0)
            past = out[name]
            nxt = out.logits[:, -1:].argmax(-1)
    return statistics.median(times)


def stream_per_token_s(fmt: str, deltas: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parser = toolcalls.StreamParser(fmt, in_reasoning=False)
        for d in deltas:
            parser.feed(d)
        out = parser.finish()
        times.append(time.perf_counter() - t0)
    assert len(out.tool_calls) == len(CALLS), (fmt, out)
    return statistics.median(times) / len(deltas)


def throughput(fmt: str, n: int, repeats: int) -> tuple[float, float, float]:
    unit = "Some words before the call. " + toolcalls.render_calls(CALLS, fmt) + "\n"
    text = unit * n
    payloads = [json.dumps(c.arguments, ensure_ascii=False) for c in CALLS] * n
    parse_t, json_t = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = toolcalls.parse(text, fmt)
        parse_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for p in payloads:
            json.loads(p)
        json_t.append(time.perf_counter() - t0)
    assert len(out.tool_calls) == len(CALLS) * n, fmt
    t = statistics.median(parse_t)
    return len(text.encode()) / t / 1e6, len(CALLS) * n / t, t / statistics.median(json_t)


def main(argv: Sequence[str] | None = None) -> None:
    ap = new_parser(__doc__)
    ap.add_argument(
        "--steps", type=int, default=64, help="decode steps per measurement (default 64)"
    )
    add_repeats_option(
        ap, 20, "streaming parses per format (the whole-text parse runs a quarter as many, >= 3)"
    )
    ap.add_argument(
        "--calls", type=int, default=200, help="call groups in the throughput text (default 200)"
    )
    ap.add_argument("--device", default="cpu", help="where the decode step runs (cpu, cuda)")
    run_benchmark(ap, measure_all, argv)


def measure_all(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        built = build_models(pathlib.Path(tmp), extra=args.model, sizes=["small"])
        for i, (label, path) in enumerate(built.items()):
            if i:
                print()
            measure(label, path, args)


def measure(label: str, path, args) -> None:
    """The cost table on one model's tokenizer and decode step."""
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = model.to(args.device).eval()
    rows = []
    for fmt in toolcalls.formats():
        deltas = token_deltas(tok, reply(fmt))
        step = decode_step_s(model, args.steps, args.device)  # interleaved: same machine state
        per_tok = stream_per_token_s(fmt, deltas, args.repeats)
        step = (step + decode_step_s(model, args.steps, args.device)) / 2
        mbs, cps, vs_json = throughput(fmt, args.calls, max(3, args.repeats // 4))
        rows.append(
            (fmt, len(deltas), per_tok * 1e6, step * 1e3, per_tok / step, mbs, cps, vs_json)
        )
    print(f"model={label}")
    print(
        f"{'format':<16} {'tokens':>6} {'parse us/tok':>12} {'decode ms':>9} "
        f"{'ratio':>7} {'MB/s':>6} {'calls/s':>9} {'x json':>7}"
    )
    for fmt, n, us, ms, ratio, mbs, cps, vs_json in rows:
        print(
            f"{fmt:<16} {n:>6} {us:>12.1f} {ms:>9.2f} {ratio:>7.2%} {mbs:>6.1f} "
            f"{cps:>9.0f} {vs_json:>7.1f}"
        )
    worst = max(r[4] for r in rows)
    print(f"\nworst streaming cost per token: {worst:.2%} of a decode step (goal <= 2%)")


if __name__ == "__main__":
    main()
