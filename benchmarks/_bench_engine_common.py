# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the engine benchmarks: models, raw baselines, timing, tables.

Every benchmark measures the engine and its raw ``transformers`` baseline side
by side in the same process, interleaved run by run, and reports medians and
their ratio, so a busy machine slows both sides alike.
"""

from __future__ import annotations

import pathlib
import statistics
import tempfile
import time
from collections.abc import Callable

import attrs
import torch

SIZES = ("tiny", "small")


def build_models(root: pathlib.Path | None = None) -> dict[str, pathlib.Path]:
    from mp13_engine.testing import build_tiny_model

    root = root or pathlib.Path(tempfile.mkdtemp(prefix="mp13-bench-"))
    return {size: build_tiny_model(root / size, family="chatml", size=size) for size in SIZES}


def prompt_ids(engine, text: str) -> list[int]:
    return engine._state.tokens.encode(engine.format_prompt(text))


def raw_generate(model, rows: list[list[int]], pad_id: int, **kwargs) -> torch.Tensor:
    """One plain HF ``generate`` over left-padded ``rows`` (the baseline)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    with torch.inference_mode():
        return model.generate(
            input_ids=ids.to(model.device),
            attention_mask=mask.to(model.device),
            do_sample=False,
            pad_token_id=pad_id,
            **kwargs,
        )


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@attrs.frozen
class Timing:
    """Seconds per run: the median, and the minimum (least disturbed by a busy machine)."""

    median: float
    best: float


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, Timing]:
    """Timings per named function, running them round-robin ``repeats`` times."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(timed(fn))
    return {k: Timing(statistics.median(v), min(v)) for k, v in times.items()}


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
