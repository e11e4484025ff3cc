# SPDX-License-Identifier: Apache-2.0
"""Engine test fixtures: tiny offline models built once per test session.

``tiny_model_path`` is the default chatml tiny model; ``tiny_model_factory(family, size="tiny",
seed=0)`` builds (or reuses) any family/size. Models are cached per (family, size, seed) for
the session, so treat the directories as read-only. ``adapter_dir`` holds two random LoRA
adapters of the default model, ``a`` (rank 4) and ``b`` (rank 2), also built once.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

TinyModelFactory = Callable[..., pathlib.Path]


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory) -> TinyModelFactory:
    from mp13_engine.testing import build_tiny_model

    built: dict[tuple[str, str, int], pathlib.Path] = {}

    def factory(family: str = "chatml", size: str = "tiny", seed: int = 0) -> pathlib.Path:
        key = (family, size, seed)
        if key not in built:
            dest = tmp_path_factory.mktemp(f"tiny-{family}-{size}-{seed}")
            built[key] = build_tiny_model(dest, family=family, seed=seed, size=size)
        return built[key]

    return factory


@pytest.fixture(scope="session")
def tiny_model_path(tiny_model_factory: TinyModelFactory) -> pathlib.Path:
    return tiny_model_factory("chatml")


@pytest.fixture(scope="session")
def adapter_dir(tiny_model_path: pathlib.Path, tmp_path_factory: pytest.TempPathFactory):
    from tests.engine.test_adapters import _peft_adapter

    root = tmp_path_factory.mktemp("two-adapters")
    _peft_adapter(tiny_model_path, root / "a", seed=3)
    _peft_adapter(tiny_model_path, root / "b", seed=4, r=2)
    return root
