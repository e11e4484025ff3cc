# SPDX-License-Identifier: Apache-2.0
"""Prompts the real-model tier asks, with the answers SmolLM2-135M-Instruct gives."""

from __future__ import annotations

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]  # "... is Paris."
