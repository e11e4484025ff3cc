# SPDX-License-Identifier: Apache-2.0
"""LoRA / QLoRA training on the engine's loaded model.

Layout: ``_config`` (TrainingConfig, TrainingEvent, TrainingResult: torch-free
values, exported eagerly by ``mp13_engine``), ``_data`` (dataset files and
lists → validated examples), ``_render`` (example → token ids + loss mask),
``_job`` (TrainingJob: the step loop that runs on the engine worker; needs
torch). This ``__init__`` imports nothing so that importing the torch-free
modules does not pull in torch.
"""

from __future__ import annotations

from typing import Any


def start_training(engine: Any, config: Any) -> Any:
    """``engine.train(config)``: prepare, set up on the worker and submit a ``TrainingJob``."""
    from mp13_engine._training._job import start_training as start

    return start(engine, config)
