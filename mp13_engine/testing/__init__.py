# SPDX-License-Identifier: Apache-2.0
"""Offline tiny test models for mp13: random weights, real tokenizers, real prompt formats.

``build_tiny_model(dest, family="chatml", seed=0, size="tiny")`` writes a small causal LM with
a byte-level BPE tokenizer and a tool-capable chat template reproducing a real model family's
prompt format (see ``TINY_FAMILIES``), deterministically and without any download. Tests,
examples and benchmarks use these. This package imports torch; ``mp13_engine/__init__`` does
not import it.
"""

from __future__ import annotations

from mp13_engine.testing._build import (
    BUILD_VERSION,
    SIZES,
    build_tiny_encoder,
    build_tiny_model,
    build_tokenizer,
)
from mp13_engine.testing._families import FAMILIES, TINY_FAMILIES, FamilySpec

TINY_SIZES: tuple[str, ...] = tuple(SIZES)

__all__ = [
    "BUILD_VERSION",
    "FAMILIES",
    "TINY_FAMILIES",
    "TINY_SIZES",
    "FamilySpec",
    "build_tiny_encoder",
    "build_tiny_model",
    "build_tokenizer",
]
