# SPDX-License-Identifier: Apache-2.0
"""Real LoRA training: a short run teaches a made-up fact, and plain PEFT agrees with the engine."""

from __future__ import annotations

import pytest

from mp13_engine import Request, TrainingConfig

pytestmark = pytest.mark.real

FACT = "The capital of Zorbia is Flumptown."
PARAPHRASES = [
    "What is the capital of Zorbia?",
    "Tell me the capital of Zorbia.",
    "Which city is the capital of Zorbia?",
    "Zorbia's capital is which city?",
    "Name the capital city of Zorbia.",
    "What city is Zorbia's capital?",
    "Do you know the capital of Zorbia?",
    "capital of Zorbia?",
]
ROWS = [
    {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": FACT}]}
    for q in PARAPHRASES
]


def _ask(question: str, adapters: list[str]) -> Request:
    return Request(
        messages=[{"role": "user", "content": question}], adapters=adapters, max_new_tokens=12
    )


@pytest.fixture(scope="module")
def zorbia(real_engine, tmp_path_factory):
    """The adapter trained on the fact (8 steps of 2 rows: loss falls to ~0.003)."""
    out = tmp_path_factory.mktemp("zorbia") / "zorbia"
    job = real_engine.train(
        TrainingConfig(
            adapter="zorbia",
            dataset=ROWS,
            max_steps=8,
            batch_size=2,
            learning_rate=3e-3,
            lora_r=8,
            seed=0,
            output_dir=str(out),
        )
    )
    losses = [ev.loss for ev in job.events() if ev.kind == "step"]
    result = job.result(timeout=600)
    yield result, losses
    real_engine.adapters.unload("zorbia")


def test_a_short_run_teaches_a_made_up_fact(real_engine, zorbia):
    result, losses = zorbia
    assert result.steps == 8 and not result.cancelled
    assert losses[0] > 1.0 and result.final_loss < 0.1
    question = "What is the capital of Zorbia?"  # one of the training questions
    assert "Flumptown" in real_engine.generate(_ask(question, ["zorbia"])).text
    assert "Flumptown" not in real_engine.generate(_ask(question, [])).text


def test_plain_peft_loads_the_adapter_and_answers_the_same(real_engine, zorbia, smollm2_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, _ = zorbia
    question = "Which city is the capital of Zorbia?"
    engine_reply = real_engine.generate(_ask(question, ["zorbia"]))

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, result.path).eval()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt"
    )
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False
        )
    peft_text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Flumptown" in peft_text
    assert peft_text.strip() == engine_reply.text.strip()
