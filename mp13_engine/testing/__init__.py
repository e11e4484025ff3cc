# SPDX-License-Identifier: Apache-2.0
"""Offline tiny test models for mp13: random weights, real tokenizers, real prompt formats.

``build_tiny_model(dest, family="chatml", seed=0, size="tiny")`` writes a small causal LM with
a byte-level BPE tokenizer and a chat template reproducing a real model family's prompt format
(see ``TINY_FAMILIES``; all tool-capable except ``smollm2``, SmolLM2's template without tool
support), deterministically and without any download. Tests,
examples and benchmarks use these. ``demo_model_path()`` returns mp13chat's built-in demo
model (a tiny chatml model trained offline on a few prompts and tool calls), building it once.
This package imports torch; ``mp13_engine/__init__`` does not import it.
"""

from __future__ import annotations

from mp13_engine.testing._build import (
    BUILD_VERSION,
    SIZES,
    build_tiny_encoder,
    build_tiny_model,
    build_tokenizer,
    tiny_model_path,
)
from mp13_engine.testing._demo import (
    DEMO_VERSION,
    DemoRecipe,
    build_demo_model,
    demo_model_path,
    demo_tools,
)
from mp13_engine.testing._demo_data import TRAINED_PROMPTS as DEMO_PROMPTS
from mp13_engine.testing._families import FAMILIES, TINY_FAMILIES, FamilySpec

TINY_SIZES: tuple[str, ...] = tuple(SIZES)

__all__ = [
    "BUILD_VERSION",
    "DEMO_PROMPTS",
    "DEMO_VERSION",
    "FAMILIES",
    "TINY_FAMILIES",
    "TINY_SIZES",
    "DemoRecipe",
    "FamilySpec",
    "build_demo_model",
    "build_tiny_encoder",
    "build_tiny_model",
    "build_tokenizer",
    "demo_model_path",
    "demo_tools",
    "tiny_model_path",
]
