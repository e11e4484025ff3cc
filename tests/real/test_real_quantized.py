# SPDX-License-Identifier: Apache-2.0
"""A real model in 4-bit (bitsandbytes, CPU backend): it still answers, and adapters load late."""

from __future__ import annotations

import pytest

from mp13_engine import Engine, Request
from tests.real._prompts import FRANCE

pytestmark = pytest.mark.real

pytest.importorskip("bitsandbytes")


@pytest.fixture(scope="module")
def engine_4bit(smollm2_path):
    with Engine.load(smollm2_path, device="cpu", quantization="4bit") as engine:
        yield engine


def test_4bit_model_loads_and_answers_sensibly(engine_4bit):
    kinds = {type(m).__name__ for m in engine_4bit.model.modules()}
    assert "Linear4bit" in kinds
    resp = engine_4bit.generate(Request(messages=FRANCE, max_new_tokens=16))
    assert resp.ok and resp.text.startswith("The capital of France is Paris")


def test_4bit_adapter_loaded_after_generating_changes_nothing_else(
    engine_4bit, smollm2_path, tmp_path
):
    """Issue 12 fix 6 on the real model: the base still answers, the adapter applies."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    before = engine_4bit.generate(Request(messages=FRANCE, max_new_tokens=16, adapters=[]))
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        lora = get_peft_model(
            base,
            LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
        )
    lora.save_pretrained(tmp_path / "noise")
    engine_4bit.adapters.load(tmp_path / "noise", name="noise")
    after = engine_4bit.generate(Request(messages=FRANCE, max_new_tokens=16, adapters=[]))
    noisy = engine_4bit.generate(Request(messages=FRANCE, max_new_tokens=16, adapters=["noise"]))
    assert after.text == before.text and "Paris" in after.text
    assert noisy.text != before.text
