# SPDX-License-Identifier: Apache-2.0
"""Inspect a local model: per-token confidence, option scores, and what sampling settings do.

Run: ``python examples/inspect_model.py`` (offline, a few seconds on CPU), or
``python examples/inspect_model.py --model PATH`` for a real local checkpoint (a folder
such as ``mp13_engine.models.fetch("smollm2-135m")`` returns, or a GGUF file).

By default it builds a *tiny random-weight* model with ``mp13_engine.testing``, so the
words are meaningless; the numbers are real measurements of that model. It shows:

1. **Confidence per token**: a greedy reply with ``Request(logprobs=True, top_logprobs=3)``;
   each token's probability, its closest alternatives, the reply's mean log-probability and
   perplexity (``exp(-mean logprob)``) and its least certain token.
2. **Scoring the options** (multiple-choice style): ``engine.score(messages, option)`` gives
   the exact log-probability of each option as the reply, however many tokens it has, and
   the reference answer's rank among them. For a one-token option it is the same number as
   a greedy first step's ``top_logprobs=20`` reports, when the option is among those 20 (it
   says so side by side); beyond them, the first step alone gives only a bound.
3. **A reference answer's perplexity**: ``engine.score`` of a given reply text: each of its
   tokens' surprise (``-logprob``), their mean log-probability and the perplexity
   (``TextScore.perplexity``, ``exp(-mean logprob)``): how well the model predicts the text
   you expected, not one it chose.
4. **What sampling settings do to the distribution**: the first token's distribution as
   each setting leaves it (``temperature``, ``top_p``, ``min_p``): its most likely token's
   probability and how many tokens can still be drawn. ``TokenLogprob`` documents that a
   sampled request's log-probabilities come from the distribution it was drawn from.
5. **A seeded comparison of settings**: eight seeded samples per setting in one batch;
   how varied they are, their mean log-probability, and that a seed reproduces its reply
   (run alone, outside the batch).

``engine.score`` renders the context exactly as ``generate`` does (here: the question as a
user message, so the text is scored as the assistant's reply) and reads the model's own
distribution at temperature 1, in one forward on the engine's worker between decode steps
(``engine.model`` itself may only be touched there).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from typing import Any

from mp13_engine import Engine, Request, Response, TokenLogprob

QUESTION = "Which planet is known as the red planet? Answer with one letter: A) Venus B) Mars"
OPTIONS = ("A", "B", "C", "D")
ANSWER = "B"  # the reference answer section 2 checks the model against
REFERENCE = "B) Mars, for the iron oxide on its surface."  # section 3 scores it


def show(engine: Engine, token: int) -> str:
    """A token as readable text: its decoded string, quoted, whitespace escaped."""
    return repr(engine.tokenizer.decode([token]))


def confidence(engine: Engine, messages: list[dict[str, str]]) -> None:
    resp = engine.generate(
        Request(messages=messages, max_new_tokens=12, logprobs=True, top_logprobs=3)
    )
    lps = resp.logprobs or ()
    print("1. confidence per token (greedy, logprobs=True, top_logprobs=3)")
    print(f"   reply: {resp.text!r}")
    print(f"   {'token':>14}  {'prob':>6}   closest alternatives")
    for lp in lps:
        alts = ", ".join(
            f"{show(engine, a.token)} {math.exp(a.logprob):.2f}"
            for a in lp.top_logprobs
            if a.token != lp.token
        )
        print(f"   {show(engine, lp.token):>14}  {math.exp(lp.logprob):6.3f}   {alts}")
    if lps:
        mean = sum(lp.logprob for lp in lps) / len(lps)
        worst = min(lps, key=lambda lp: lp.logprob)
        print(
            f"   {len(lps)} tokens, mean logprob {mean:.3f}, perplexity {math.exp(-mean):.2f}; "
            f"least certain: {show(engine, worst.token)} at p={math.exp(worst.logprob):.3f}"
        )


def score_options(engine: Engine, messages: list[dict[str, str]]) -> None:
    # The greedy first step: its top_logprobs are the model's own distribution (temperature 1),
    # which is the distribution engine.score reads.
    resp = engine.generate(
        Request(messages=messages, max_new_tokens=1, logprobs=True, top_logprobs=20)
    )
    first = {a.token: a.logprob for a in resp.logprobs[0].top_logprobs} if resp.logprobs else {}
    print("\n2. scoring the options as the reply (engine.score; first step's top_logprobs=20)")
    scored: dict[str, float] = {}
    for option in OPTIONS:
        result = engine.score(messages, option)
        lp = scored[option] = result.sum_logprob
        n = len(result.logprobs)
        line = (
            f"   {option!r:>9}: {n} token{'s' * (n > 1)}, logprob {lp:8.3f} (p={math.exp(lp):.4f})"
        )
        if n == 1 and result.tokens[0] in first:
            line += f"; first step's top_logprobs: {first[result.tokens[0]]:8.3f}"
        elif n == 1:
            line += "; not among the first step's 20 most likely"
        print(line)
    if resp.logprobs:
        print(f"   the model's own first token: {show(engine, resp.logprobs[0].token)}")
    rank = 1 + sum(lp > scored[ANSWER] for lp in scored.values())
    best = max(scored, key=lambda o: scored[o])
    verdict = "right" if best == ANSWER else f"wrong: it prefers {best!r}"
    print(f"   reference answer {ANSWER!r}: rank {rank} of {len(scored)} options ({verdict})")


def reference_perplexity(engine: Engine, messages: list[dict[str, str]]) -> None:
    # top_logprobs=1: with each token, the one the model found likeliest there.
    result = engine.score(messages, REFERENCE, top_logprobs=1)
    print(f"\n3. a reference answer's perplexity (engine.score): {REFERENCE!r}")
    print(f"   {'token':>14}  {'surprise':>8}  the model's likeliest instead")
    for lp in result.logprobs:
        best = lp.top_logprobs[0]
        instead = "(it)" if best.token == lp.token else show(engine, best.token)
        print(f"   {show(engine, lp.token):>14}  {-lp.logprob:8.3f}  {instead}")
    print(
        f"   reference: {len(result.logprobs)} tokens, mean logprob {result.mean_logprob:.3f}, "
        f"perplexity {result.perplexity:.2f}"
    )


SETTINGS: dict[str, dict[str, Any]] = {  # Request keywords, by a readable name
    "temperature=0.7": {"temperature": 0.7},
    "temperature=1.0": {"temperature": 1.0},
    "temperature=1.5": {"temperature": 1.5},
    "temperature=1.0 top_p=0.5": {"temperature": 1.0, "top_p": 0.5},
    "temperature=1.0 min_p=0.3": {"temperature": 1.0, "min_p": 0.3},
}


def distributions(engine: Engine, messages: list[dict[str, str]]) -> None:
    print("\n4. the first token's distribution under each setting (top_logprobs=20)")
    print(f"   {'setting':<28} {'top token':>14} {'its p':>6} {'top-20 mass':>11}  can be drawn")
    reqs = [Request(messages=messages, max_new_tokens=1, logprobs=True, top_logprobs=20)]
    reqs += [
        Request(messages=messages, max_new_tokens=1, logprobs=True, top_logprobs=20, seed=0, **s)
        for s in SETTINGS.values()
    ]
    names = ["greedy (the model's own)", *SETTINGS]
    for name, resp in zip(names, engine.generate_many(reqs), strict=True):
        if not resp.logprobs:
            print(f"   {name:<28} no token generated ({resp.finish_reason})")
            continue
        top = resp.logprobs[0].top_logprobs
        # Tokens a setting rules out are never alternatives, so fewer than 20 means all of them.
        count = f"{len(top)} token{'s' * (len(top) > 1)}" if len(top) < 20 else "20 or more"
        mass = sum(math.exp(a.logprob) for a in top)
        print(
            f"   {name:<28} {show(engine, top[0].token):>14} {math.exp(top[0].logprob):6.3f} "
            f"{mass:11.3f}  {count}"
        )


def mean_logprob(lps: tuple[TokenLogprob, ...] | None) -> float:
    return sum(lp.logprob for lp in lps) / len(lps) if lps else float("nan")


def seeded_comparison(engine: Engine, messages: list[dict[str, str]], samples: int) -> None:
    print(
        f"\n5. seeded comparison: {samples} samples per setting (seeds 0..{samples - 1}), one batch"
    )
    reqs = [
        Request(messages=messages, max_new_tokens=12, logprobs=True, seed=seed, **s)
        for s in SETTINGS.values()
        for seed in range(samples)
    ]
    t = time.perf_counter()
    out = engine.generate_many(reqs)
    took = time.perf_counter() - t
    print(f"   {len(reqs)} requests in {took:.1f}s")
    print("   (a sampled token's logprob is from the distribution it was drawn from, so it")
    print("   says how narrow a setting made the draw, not how sure the model was: see 1.)")
    print(f"   {'setting':<28} {'distinct':>8} {'mean logprob':>12}  seed 0's reply")
    rows: dict[str, list[Response]] = {}
    for i, name in enumerate(SETTINGS):
        rows[name] = out[i * samples : (i + 1) * samples]
        texts = [r.text for r in rows[name]]
        mean = sum(mean_logprob(r.logprobs) for r in rows[name]) / samples
        print(f"   {name:<28} {len(set(texts)):>5}/{samples} {mean:12.3f}  {texts[0][:40]!r}")
    # A seed reproduces its reply, also when the row ran inside a batch of other settings.
    again = engine.generate_many(
        [
            Request(messages=messages, max_new_tokens=12, seed=samples - 1, **s)
            for s in SETTINGS.values()
        ]
    )
    same = sum(a.text == rows[n][-1].text for a, n in zip(again, SETTINGS, strict=True))
    print(
        f"   seed {samples - 1} rerun alone per setting: {same}/{len(SETTINGS)} replies identical"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", help="a local model directory or GGUF file (default: build a tiny one)"
    )
    ap.add_argument("--samples", type=int, default=8, help="seeded samples per setting (5.)")
    args = ap.parse_args()

    tmp = None
    if args.model is None:
        from mp13_engine.testing import build_tiny_model

        tmp = tempfile.TemporaryDirectory(prefix="mp13-inspect-")
        args.model = str(build_tiny_model(tmp.name, family="chatml"))
        print("Built a tiny random-weight model offline: its words mean nothing, its numbers")
        print("are real measurements of it. Pass --model PATH to inspect a real model.\n")

    messages = [{"role": "user", "content": QUESTION}]
    with Engine.load(args.model, device="cpu") as engine:
        print(f"Model: {args.model}\nPrompt: {QUESTION!r}\n")
        confidence(engine, messages)
        score_options(engine, messages)
        reference_perplexity(engine, messages)
        distributions(engine, messages)
        seeded_comparison(engine, messages, args.samples)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
