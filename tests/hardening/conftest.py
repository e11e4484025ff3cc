# SPDX-License-Identifier: MIT
"""Fixtures of the hardening campaign: tiny offline models and two random LoRA adapters.

Models are built once per test session (``tiny_factory(family)``) and are read-only.
``adapters`` holds two plain-PEFT adapters of the chatml tiny model, ``a`` (rank 4) and
``b`` (rank 2), with random non-zero weights, so each changes the output.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest


@pytest.fixture(scope="session")
def tiny_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., pathlib.Path]:
    from mp13_engine.testing import build_tiny_model

    built: dict[str, pathlib.Path] = {}

    def factory(family: str = "chatml") -> pathlib.Path:
        if family not in built:
            dest = tmp_path_factory.mktemp(f"hardening-{family}")
            built[family] = build_tiny_model(dest, family=family, seed=0)
        return built[family]

    return factory


@pytest.fixture(scope="session")
def tiny(tiny_factory) -> pathlib.Path:
    return tiny_factory("chatml")


@pytest.fixture(scope="session")
def adapters(tiny, tmp_path_factory) -> pathlib.Path:
    from tests.engine.test_adapters import _peft_adapter

    root = tmp_path_factory.mktemp("hardening-adapters")
    _peft_adapter(tiny, root / "a", seed=3)
    _peft_adapter(tiny, root / "b", seed=4, r=2)
    return root
