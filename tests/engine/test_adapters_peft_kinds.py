# SPDX-License-Identifier: Apache-2.0
"""Adapters made with PEFT the many ways users make them, served as PEFT serves each.

Each adapter is made as a user would (``LoraConfig`` -> ``get_peft_model`` ->
``save_pretrained``, random non-zero weights so it matters) and either serves exactly
the greedy reply PEFT's own model gives for it, alone and mixed in one batch with
adapters of other shapes, on both ``mixed_lora`` paths; or is refused at load with an
``AdapterError`` naming the setting, before the shared base model is touched.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import torch

from mp13_engine import AdapterError, Engine, Request

PROMPTS = ["Hello there", "What is a cat?", "Tell me a story"]
N = 8


def _made(base_path: pathlib.Path, dest: pathlib.Path, seed: int, **settings: Any) -> pathlib.Path:
    """A LoRA adapter saved the PEFT way, every trainable weight moved off its start."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    settings = {"r": 4, "lora_alpha": 8, **settings}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(base_path), LoraConfig(**settings)
        )
        with torch.no_grad():
            for param in model.parameters():
                if param.requires_grad:  # lora_B starts at zero, copies and biases as the base's
                    param.add_(torch.randn_like(param) * 0.3)
    model.save_pretrained(dest)
    return dest


def _req(prompt: str, adapters: list[str] | None) -> Request:
    return Request(
        messages=[{"role": "user", "content": prompt}], adapters=adapters, max_new_tokens=N
    )


def _peft_reply(engine: Engine, base_path: pathlib.Path, folder: pathlib.Path, prompt: str) -> str:
    """PEFT's own greedy reply for the adapter in ``folder`` (a fresh base model)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_path)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), folder)
    ids = tok(engine.format_prompt(_req(prompt, [])), add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        out = model.eval().generate(**ids, max_new_tokens=N, do_sample=False)
    return str(tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))


# name -> LoraConfig settings: the shapes users give their adapters.
KINDS: dict[str, dict[str, Any]] = {
    "rslora": {"target_modules": "all-linear", "lora_alpha": 16, "use_rslora": True},
    "attn0": {
        "r": 2,
        "lora_alpha": 16,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "layers_to_transform": [0],
    },
    "mlp": {
        "r": 6,
        "lora_alpha": 3,
        "target_modules": ["gate_proj", "up_proj", "down_proj"],
        "rank_pattern": {"up_proj": 2},
        "alpha_pattern": {"down_proj": 24},
        "lora_dropout": 0.3,
    },
    "lbias": {"target_modules": ["q_proj", "v_proj"], "lora_bias": True},
    "emb": {"target_modules": ["embed_tokens", "q_proj"]},
    "head": {"target_modules": ["q_proj"], "modules_to_save": ["lm_head"]},
}


@pytest.fixture(scope="module")
def kinds(tiny_model_path, tmp_path_factory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("peft-kinds")
    return {
        name: _made(tiny_model_path, root / name, seed, **settings)
        for seed, (name, settings) in enumerate(KINDS.items())
    }


def _refused_and_base_untouched(engine: Engine, folder: pathlib.Path, match: str) -> None:
    before = [engine.generate(_req(p, [])).raw_text for p in PROMPTS]
    with pytest.raises(AdapterError, match=match):
        engine.adapters.load(folder, name="bad")
    assert "bad" not in engine.adapters
    assert [engine.generate(_req(p, [])).raw_text for p in PROMPTS] == before


@pytest.mark.parametrize("init", ["pissa", "olora"])
def test_an_adapter_whose_init_rewrites_the_base_is_refused(tiny_model_path, tmp_path, init):
    """PEFT runs PiSSA / OLoRA initialisation again on load, subtracting from the base
    weights every adapter and the base model share: loading one used to change every other
    reply silently, and they stayed changed after it was unloaded."""
    folder = _made(
        tiny_model_path, tmp_path / init, 3, target_modules=["q_proj"], init_lora_weights=init
    )
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        _refused_and_base_untouched(
            engine, folder, rf"init_lora_weights='{init}'.*path_initial_model_for_weight_conversion"
        )


@pytest.mark.parametrize("bias", ["lora_only", "all"])
def test_an_adapter_holding_base_biases_is_refused(tiny_model_path, tmp_path, bias):
    """PEFT loads the biases a ``bias="lora_only"``/``"all"`` adapter saved over the base
    model's own: every other adapter and the base model changed silently."""
    folder = _made(tiny_model_path, tmp_path / bias, 4, target_modules=["q_proj"], bias=bias)
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        _refused_and_base_untouched(
            engine, folder, rf"bias='{bias}' and holds \d+ bias vector.*Retrain it with bias='none'"
        )


def test_bias_setting_without_base_biases_loads(tiny_model_path, tmp_path):
    """``bias="lora_only"`` on modules without a bias saves none: nothing shared to change."""
    folder = _made(tiny_model_path, tmp_path / "nb", 5, target_modules=["o_proj"], bias="lora_only")
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        engine.adapters.load(folder, name="nb")
        assert engine.generate(_req(PROMPTS[0], ["nb"])).raw_text == _peft_reply(
            engine, tiny_model_path, folder, PROMPTS[0]
        )
