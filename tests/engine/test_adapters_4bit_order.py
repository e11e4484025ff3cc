# SPDX-License-Identifier: Apache-2.0
"""4-bit on CPU: adapters loaded or trained after generating work (issue 12, fix 6).

bitsandbytes repacks a 4-bit weight for CPU inference on its first forward; PEFT
wrapping the layer afterwards turned every later output into garbage, the base
model's included. The engine keeps the weights in one layout (``_compat.keep_4bit_layout``).
"""

from __future__ import annotations

import pytest
import torch

from mp13_engine import AdapterError, Engine, Request, TrainingConfig
from tests.engine._bnb import require_bitsandbytes_cpu

require_bitsandbytes_cpu()

PROMPTS = ["Hello", "What is mp13?"]


@pytest.fixture(scope="module")
def lora_dir(tiny_model_path, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dest = tmp_path_factory.mktemp("lora4") / "a"
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(tiny_model_path),
            LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False),
        )
    model.save_pretrained(dest)
    return dest


def _texts(engine, adapters) -> list[str]:
    requests = [Request(prompt=p, adapters=adapters, max_new_tokens=8) for p in PROMPTS]
    return [engine.generate(r).raw_text for r in requests]


@pytest.fixture(scope="module")
def reference(tiny_model_path, lora_dir):
    """Replies of a 4-bit engine that loaded the adapter before any request."""
    with Engine.load(str(tiny_model_path), device="cpu", quantization="4bit") as engine:
        engine.adapters.load(lora_dir, name="a")
        return {"base": _texts(engine, []), "a": _texts(engine, ["a"])}


def test_an_adapter_loaded_after_generating_gives_the_same_replies(
    tiny_model_path, lora_dir, reference
):
    with Engine.load(str(tiny_model_path), device="cpu", quantization="4bit") as engine:
        assert _texts(engine, []) == reference["base"]
        engine.adapters.load(lora_dir, name="a")
        assert _texts(engine, []) == reference["base"]
        assert _texts(engine, ["a"]) == reference["a"]
    assert reference["a"] != reference["base"]


def test_training_after_generating_leaves_the_base_intact(tiny_model_path, tmp_path, reference):
    rows = [{"prompt": "Capital of Zorbia?", "completion": " Flumptown."}] * 4
    with Engine.load(str(tiny_model_path), device="cpu", quantization="4bit") as engine:
        assert _texts(engine, []) == reference["base"]
        job = engine.train(
            TrainingConfig(
                adapter="z", dataset=rows, max_steps=2, batch_size=2, output_dir=str(tmp_path)
            )
        )
        assert job.result(timeout=300).steps == 2
        assert _texts(engine, []) == reference["base"]


def test_a_repacked_model_refuses_adapters_instead_of_corrupting_them(tiny_model_path, lora_dir):
    """The safety net, should a bitsandbytes version repack anyway."""
    with Engine.load(str(tiny_model_path), device="cpu", quantization="4bit") as engine:

        def repack_one() -> None:
            layer = next(m for m in engine.model.modules() if type(m).__name__ == "Linear4bit")
            layer.support_avx512bf16_for_cpu = True  # what bitsandbytes does by default
            layer.weight.quant_state.packing_format_for_cpu = True

        engine._run_on_worker(repack_one)
        with pytest.raises(AdapterError, match="before the first request"):
            engine.adapters.load(lora_dir, name="a")
        assert engine.adapters.list() == []
