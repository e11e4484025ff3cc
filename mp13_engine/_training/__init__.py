# SPDX-License-Identifier: Apache-2.0
"""LoRA / QLoRA training on the engine's loaded model.

Layout: ``_config`` (TrainingConfig, TrainingEvent, TrainingResult: torch-free
values, exported eagerly by ``mp13_engine``), ``_data`` (dataset files and
lists → validated examples), ``_render`` (example → token ids + loss mask),
``_host`` (``TrainingHost``: what a job may use of its engine), ``_trainer``
(the optimizer step; needs torch) and ``_job`` (``TrainingJob`` and
``start_training``, which ``Engine.train`` calls). This ``__init__`` imports
nothing, so importing the torch-free modules does not pull in torch.
"""
