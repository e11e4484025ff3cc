# SPDX-License-Identifier: Apache-2.0
"""Train a LoRA adapter on a tiny offline model and show it answering what it learned.

The tiny model has random weights, so before training it answers gibberish. The
script trains an adapter on six question/answer chats (loss on the assistant
turns only) while the engine keeps serving, prints progress events, then asks
the same questions again: greedy decoding with the adapter reproduces the
trained answers, while the base model (same engine, no reload) does not.

    python examples/train_adapter.py [--steps 150] [--family chatml]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings
from pathlib import Path

from mp13_engine import Engine, Request, TrainingConfig
from mp13_engine.testing import TINY_FAMILIES, build_tiny_model

SYSTEM = {"role": "system", "content": "Answer briefly."}
FACTS = [
    ("What is the capital of Zorbia?", "Flumptown."),
    ("Who paints blue cats?", "Mira Okonkwo."),
    ("What is Qi's favourite number?", "Forty-one."),
    ("What colour is a moonfruit?", "Silver green."),
    ("What is the ship called?", "The Gull."),
    ("When does the bell ring?", "At noon."),
]


def ask(engine: Engine, question: str, adapters: list[str]) -> str:
    request = Request(
        messages=[SYSTEM, {"role": "user", "content": question}],
        adapters=adapters,
        max_new_tokens=16,
    )
    return engine.generate(request).text.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--family", default="chatml", choices=list(TINY_FAMILIES))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    rows = [
        {"messages": [SYSTEM, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in FACTS
    ]
    with tempfile.TemporaryDirectory() as tmp:
        model_path = build_tiny_model(Path(tmp) / "model", family=args.family, seed=0)
        with Engine.load(str(model_path), device="cpu") as engine:
            before = [ask(engine, q, []) for q, _ in FACTS]
            job = engine.train(
                TrainingConfig(
                    adapter="facts",
                    dataset=rows,
                    max_steps=args.steps,
                    batch_size=6,
                    learning_rate=3e-3,
                    lora_r=8,
                    output_dir=str(Path(tmp) / "facts"),
                )
            )
            # The engine still serves while the job runs.
            busy = engine.generate("Hello", max_new_tokens=4)
            print(f"served a request during training: finish_reason={busy.finish_reason.value}")
            for event in job.events():
                if event.kind == "step" and (event.step % 25 == 0 or event.step == 1):
                    print(
                        f"step {event.step:4d}/{event.max_steps}  loss {event.loss:.4f}  "
                        f"lr {event.learning_rate:.2e}  {event.tokens_per_s:,.0f} tok/s  "
                        f"eta {event.eta_s:.1f}s"
                    )
            result = job.result()
            print(f"trained {result.steps} steps, final loss {result.final_loss:.4f}")
            print(f"saved in PEFT format at {result.path}\n")
            after = [ask(engine, q, ["facts"]) for q, _ in FACTS]
            base = [ask(engine, q, []) for q, _ in FACTS]
    hits = 0
    for (question, answer), b, a, again in zip(FACTS, before, after, base, strict=True):
        hits += a == answer
        print(f"Q: {question}")
        print(f"   trained answer : {answer}")
        print(f"   base, before   : {b[:40]!r}")
        print(f"   with adapter   : {a!r}  {'OK' if a == answer else 'MISS'}")
        print(f"   base, after    : {again[:40]!r}  (unchanged: {again == b})")
    print(f"\n{hits}/{len(FACTS)} trained answers reproduced greedily with the adapter.")


if __name__ == "__main__":
    main()
