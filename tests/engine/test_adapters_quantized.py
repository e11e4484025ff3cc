# SPDX-License-Identifier: Apache-2.0
"""Adapters on a bitsandbytes 4-bit / 8-bit base (CPU backend): load, serve, train (QLoRA)."""

from __future__ import annotations

import warnings

import pytest
import torch

from mp13_engine import Engine, Request, TrainingConfig
from tests.engine._bnb import require_bitsandbytes_cpu

pytestmark = pytest.mark.slow

require_bitsandbytes_cpu()

SYSTEM = {"role": "system", "content": "Answer."}
QA = [("Capital of Zorbia?", "Flumptown."), ("Who paints blue cats?", "Mira Okonkwo.")]
ROWS = [
    {"messages": [SYSTEM, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
    for q, a in QA
]


@pytest.fixture(scope="module")
def plain_adapter(tiny_model_path, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dest = tmp_path_factory.mktemp("qadapter") / "a"
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(tiny_model_path),
            LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False),
        )
    model.save_pretrained(dest)
    return dest


@pytest.mark.parametrize("quantization", ["4bit", "8bit"])
def test_quantized_base_serves_mixed_adapters_and_trains(
    tiny_model_path, plain_adapter, tmp_path, quantization
):
    warnings.filterwarnings("ignore", message="MatMul8bitLt")
    with Engine.load(str(tiny_model_path), device="cpu", quantization=quantization) as engine:
        engine.adapters.load(plain_adapter, name="a")
        plan = [["a"], [], ["a"], []]
        wave = engine.generate_many(
            [Request(prompt="Hello", adapters=ad, max_new_tokens=6) for ad in plan]
        )
        assert all(r.ok for r in wave)
        assert wave[0].raw_text == wave[2].raw_text and wave[1].raw_text == wave[3].raw_text
        assert wave[0].raw_text != wave[1].raw_text
        alone = engine.generate(Request(prompt="Hello", adapters=["a"], max_new_tokens=6))
        assert alone.raw_text == wave[0].raw_text

        job = engine.train(
            TrainingConfig(
                adapter="q",
                dataset=ROWS,
                max_steps=50,
                batch_size=2,
                learning_rate=5e-3,
                output_dir=str(tmp_path / "q"),
            )
        )
        result = job.result(timeout=300)
        assert result.final_loss < 0.5
        for question, answer in QA:
            request = Request(
                messages=[SYSTEM, {"role": "user", "content": question}],
                adapters=["q"],
                max_new_tokens=12,
            )
            assert engine.generate(request).text.strip() == answer
    # The QLoRA adapter is plain PEFT: an unquantized base loads it and gives its answers.
    with Engine.load(str(tiny_model_path), device="cpu") as plain:
        plain.adapters.load(tmp_path / "q", name="q")
        for question, answer in QA:
            request = Request(
                messages=[SYSTEM, {"role": "user", "content": question}],
                adapters=["q"],
                max_new_tokens=12,
            )
            assert plain.generate(request).text.strip() == answer


@pytest.mark.parametrize("quantization", ["4bit", "8bit"])
def test_peft_mixed_batches_on_a_quantized_base_match_each_adapter_alone(
    tiny_model_path, plain_adapter, quantization
):
    """mixed_lora="peft" (PEFT's own per-row loop) on bitsandbytes layers, as the fused path
    is checked above."""
    warnings.filterwarnings("ignore", message="MatMul8bitLt")
    with Engine.load(
        str(tiny_model_path), device="cpu", quantization=quantization, mixed_lora="peft"
    ) as engine:
        engine.adapters.load(plain_adapter, name="a")
        prompts = ["Hello", "What is mp13?"]
        alone = {
            (p, name): engine.generate(
                Request(prompt=p, adapters=[name] if name else [], max_new_tokens=6)
            ).raw_text
            for p in prompts
            for name in ("a", None)
        }
        plan = [(p, name) for p in prompts for name in ("a", None)]
        wave = engine.generate_many(
            [Request(prompt=p, adapters=[n] if n else [], max_new_tokens=6) for p, n in plan]
        )
        assert [r.raw_text for r in wave] == [alone[key] for key in plan]
        assert alone[("Hello", "a")] != alone[("Hello", None)]


def test_a_precision_that_cannot_train_a_quantized_half_model_is_refused_at_train(
    tiny_model_path, tmp_path
):
    """Regression: a float16 4-bit model with precision="bfloat16" (or the reverse, or 8-bit)
    was queued, then failed at its first forward with torch's "Unexpected floating
    ScalarType in at::autocast::prioritize". Now engine.train refuses it, saying what to use;
    the precisions that do train are left alone."""
    from mp13_engine import ConfigError

    rows = [{"prompt": "Capital of Zorbia?", "completion": " Flumptown."}] * 2

    def config(name: str, precision: str) -> TrainingConfig:
        return TrainingConfig(
            adapter=name,
            dataset=rows,
            max_steps=1,
            batch_size=2,
            precision=precision,
            output_dir=str(tmp_path / name),
        )

    for quantization, dtype, precision in [
        ("4bit", "float16", "bfloat16"),
        ("4bit", "bfloat16", "float16"),
        ("8bit", "bfloat16", "float16"),
    ]:
        with Engine.load(
            str(tiny_model_path), device="cpu", quantization=quantization, dtype=dtype
        ) as engine:
            with pytest.raises(ConfigError) as info:
                engine.train(config("bad", precision))
            message = str(info.value)
            assert f"precision={precision!r} cannot train" in message
            assert f"computes in {dtype}" in message and "precision='auto'" in message
            assert engine.adapters.list() == [] and not (tmp_path / "bad").exists()
            own = engine.train(config(f"own-{quantization}-{dtype}", dtype))
            assert own.result(timeout=120).steps == 1
    with Engine.load(str(tiny_model_path), device="cpu", quantization="4bit") as engine:
        for precision in ("bfloat16", "float16"):  # a float32 quantized model trains under both
            job = engine.train(config(f"f32-{precision}", precision))
            assert job.result(timeout=120).steps == 1


def test_an_adapter_loaded_after_serving_on_8bit_gives_the_same_replies(
    tiny_model_path, plain_adapter
):
    """The README says adapters load at any time on a quantized base; test_adapters_4bit_order
    checks 4-bit (where bitsandbytes repacks on the first forward), this the 8-bit base."""
    warnings.filterwarnings("ignore", message="MatMul8bitLt")
    prompts = ["Hello", "What is mp13?"]

    def texts(engine, adapters):
        return [
            engine.generate(Request(prompt=p, adapters=adapters, max_new_tokens=8)).raw_text
            for p in prompts
        ]

    with Engine.load(str(tiny_model_path), device="cpu", quantization="8bit") as engine:
        engine.adapters.load(plain_adapter, name="a")
        early = (texts(engine, []), texts(engine, ["a"]))
    with Engine.load(str(tiny_model_path), device="cpu", quantization="8bit") as engine:
        assert texts(engine, []) == early[0]
        engine.adapters.load(plain_adapter, name="a")
        assert (texts(engine, []), texts(engine, ["a"])) == early
    assert early[0] != early[1]
