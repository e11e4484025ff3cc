# SPDX-License-Identifier: Apache-2.0
"""Several LoRA adapters on one loaded model, mixed in one wave.

Builds a tiny model offline and three LoRA adapters for it (random weights, saved
the plain PEFT way), loads them into one engine, and sends a single wave whose
rows use different adapters, the base model and a combination of two adapters.
It then shows that every row of the wave answers exactly as it does alone, and
times the same wave on an engine that uses PEFT's own per-adapter loop
(``mixed_lora="peft"``) instead of mp13's fused path.

    python examples/multi_adapter.py
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from pathlib import Path

from mp13_engine import Engine, Request
from mp13_engine.testing import build_tiny_model

# What each row of the wave asks for: None = the engine's default (set below).
ROWS = [["formal"], ["pirate"], [], ["terse"], None, ["pirate", "terse"], ["formal"], ["terse"]]


def make_adapter(base: Path, dest: Path, seed: int, rank: int) -> None:
    """A LoRA adapter with random weights, written by plain PEFT (any PEFT adapter works)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(base),
            LoraConfig(r=rank, target_modules="all-linear", init_lora_weights=False),
        )
    model.save_pretrained(dest)


def wave(adapters: list | None) -> list[Request]:
    return [
        Request(
            messages=[{"role": "user", "content": f"Tell me about ships, number {i}."}],
            adapters=names,
            max_new_tokens=24,
            min_new_tokens=24,
        )
        for i, names in enumerate(adapters)
    ]


def timed(engine: Engine, requests: list[Request]) -> float:
    engine.generate_many(requests)  # warm-up
    t0 = time.perf_counter()
    for _ in range(3):
        engine.generate_many(requests)
    return (time.perf_counter() - t0) / 3


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = build_tiny_model(root / "model", family="chatml", seed=0)
        for seed, (name, rank) in enumerate([("formal", 8), ("pirate", 4), ("terse", 16)]):
            make_adapter(base, root / "adapters" / name, seed=seed, rank=rank)

        with (
            Engine.load(str(base), device="cpu", adapters_dir=str(root / "adapters")) as engine,
            Engine.load(str(base), device="cpu", mixed_lora="peft") as peft,
        ):
            for name in ("formal", "pirate", "terse"):
                info = engine.adapters.load(name)  # short names resolve under adapters_dir
                peft.adapters.load(root / "adapters" / name)
                print(f"loaded {info.name:7} rank {info.rank:2}  targets {', '.join(info.targets)}")
            engine.adapters.set_default("formal")  # rows that name no adapter use it
            peft.adapters.set_default("formal")

            requests = wave(ROWS)
            together = engine.generate_many(requests)
            print(f"\none wave of {len(requests)} rows:")
            for request, response in zip(requests, together, strict=True):
                alone = engine.generate(request)
                same = "same as alone" if alone.raw_text == response.raw_text else "DIFFERENT"
                asked = "default" if request.adapters is None else list(request.adapters) or "base"
                print(
                    f"  asked {asked!s:22} ran on {list(response.metrics.adapters)!s:22} "
                    f"batch {response.metrics.batch_size}  {same}"
                )

            fused_s, peft_s = timed(engine, requests), timed(peft, requests)
            print(
                f"\nthe wave takes {fused_s * 1000:.0f} ms fused, {peft_s * 1000:.0f} ms on "
                f"PEFT's per-adapter loop ({peft_s / fused_s:.1f}x)"
            )


if __name__ == "__main__":
    main()
