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

from mp13_engine import AdapterError, Engine, Request, TrainingConfig

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


@pytest.mark.slow
@pytest.mark.parametrize("mixed_lora", ["fused", "peft"])
def test_each_kind_serves_what_peft_gives_alone_mixed_and_reloaded(
    tiny_model_path, kinds, mixed_lora
):
    with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
        base = [engine.generate(_req(p, [])).raw_text for p in PROMPTS]
        for name, folder in kinds.items():
            engine.adapters.load(folder, name=name)
        expected = {
            name: [_peft_reply(engine, tiny_model_path, folder, p) for p in PROMPTS]
            for name, folder in kinds.items()
        }
        for name in kinds:
            alone = [engine.generate(_req(p, [name])).raw_text for p in PROMPTS]
            assert alone == expected[name], name
            assert alone != base, f"{name} changed nothing: the check would prove nothing"
        plan = [*kinds, None, *reversed(kinds)]
        requests = [_req(PROMPTS[i % 3], [n] if n else []) for i, n in enumerate(plan)]
        together = engine.generate_many(requests)
        assert max(r.metrics.batch_size for r in together) > 1  # they shared forwards
        for i, (name, reply) in enumerate(zip(plan, together, strict=True)):
            assert reply.raw_text == (expected[name] if name else base)[i % 3], (name, i)
        for name in kinds:
            engine.adapters.unload(name)
        for name in reversed(kinds):
            engine.adapters.load(kinds[name], name=name)
        for name in kinds:
            assert engine.generate(_req(PROMPTS[0], [name])).raw_text == expected[name][0]


@pytest.mark.parametrize("mixed_lora", ["fused", "peft"])
def test_an_adapter_that_saved_lm_head_leaves_the_other_adapters_serving(
    tiny_model_path, kinds, tmp_path, mixed_lora
):
    """PEFT's modules_to_save wrapper looked each row's adapter up among its copies: once
    an adapter with ``modules_to_save=["lm_head"]`` was loaded, every request on another
    adapter (``mixed_lora="peft"``), or mixed with it in a batch, failed with KeyError."""
    plain = _made(tiny_model_path, tmp_path / "plain", 9, target_modules="all-linear")
    with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
        engine.adapters.load(plain, name="plain")
        before = engine.generate(_req(PROMPTS[1], ["plain"]))
        engine.adapters.load(kinds["head"], name="head")
        head = engine.generate(_req(PROMPTS[1], ["head"]))
        after = engine.generate(_req(PROMPTS[1], ["plain"]))
        assert after.ok and after.raw_text == before.raw_text
        assert head.raw_text == _peft_reply(engine, tiny_model_path, kinds["head"], PROMPTS[1])
        plan = [["plain"], ["head"], [], ["head"], ["plain"]]
        together = engine.generate_many([_req(PROMPTS[1], ad) for ad in plan])
        base = engine.generate(_req(PROMPTS[1], [])).raw_text
        want = {"plain": before.raw_text, "head": head.raw_text}
        assert [r.raw_text for r in together] == [want[a[0]] if a else base for a in plan]
        both = engine.generate(_req(PROMPTS[1], ["plain", "head"]))  # it used to lose the head
        assert not both.ok
        assert both.error.startswith("Cannot combine adapters ['head', 'plain']: 'head' brings")
        assert engine.generate(_req(PROMPTS[1], ["head"])).raw_text == head.raw_text


def _tokens_made(base_path: pathlib.Path, dest: pathlib.Path, seed: int) -> pathlib.Path:
    """An adapter that changes only the embeddings of the prompts' tokens
    (``trainable_token_indices``); its ``q_proj`` LoRA stays at PEFT's no-op start."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_path)
    indices = sorted({i for p in PROMPTS for i in tok(p, add_special_tokens=False)["input_ids"]})
    config = LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=indices)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path), config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "trainable_tokens_delta" in name:
                    param.add_(torch.randn_like(param) * 0.3)
    model.save_pretrained(dest)
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("mixed_lora", ["fused", "peft"])
def test_an_adapter_with_trainable_tokens_serves_what_peft_gives_beside_plain_lora(
    tiny_model_path, tmp_path, mixed_lora
):
    """PEFT's trainable-tokens wrapper looked each row's adapter up among its token deltas:
    once an adapter saved with ``trainable_token_indices`` was loaded, every request on
    another adapter (``mixed_lora="peft"``), or mixed with it in a batch, failed with
    KeyError, and so did loading or saving any adapter without tokens. The engine serves
    it as PEFT does, and the others as they were."""
    plain = _made(tiny_model_path, tmp_path / "plain", 9, target_modules="all-linear")
    tokens = _tokens_made(tiny_model_path, tmp_path / "tokens", 10)
    with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
        base = [engine.generate(_req(p, [])).raw_text for p in PROMPTS]
        engine.adapters.load(tokens, name="tokens")
        engine.adapters.load(plain, name="plain")  # it used to fail: KeyError
        want = {
            None: base,
            "plain": [_peft_reply(engine, tiny_model_path, plain, p) for p in PROMPTS],
            "tokens": [_peft_reply(engine, tiny_model_path, tokens, p) for p in PROMPTS],
        }
        assert want["tokens"] != base, "the tokens changed nothing: the check would prove nothing"
        for name in want:
            alone = [engine.generate(_req(p, [name] if name else [])) for p in PROMPTS]
            assert [r.raw_text for r in alone] == want[name], name
        plan = ["plain", "tokens", None, "tokens", "plain", None]
        together = engine.generate_many(
            [_req(PROMPTS[i % 3], [n] if n else []) for i, n in enumerate(plan)]
        )
        assert max(r.metrics.batch_size for r in together) > 1  # they shared forwards
        assert [r.raw_text for r in together] == [want[n][i % 3] for i, n in enumerate(plan)]
        for name in ("plain", "tokens"):  # saving plain used to fail: KeyError
            saved = engine.adapters.save(name, tmp_path / "saved" / name)
            engine.adapters.load(saved, name=f"{name}2")
            assert engine.generate(_req(PROMPTS[0], [f"{name}2"])).raw_text == want[name][0]
        both = engine.generate(_req(PROMPTS[0], ["plain", "tokens"]))  # it lost the tokens
        assert not both.ok
        assert both.error.startswith(
            "Cannot combine adapters ['plain', 'tokens']: 'tokens' brings token embeddings of "
            "its own (trainable_token_indices=["
        )
        engine.adapters.unload("tokens")
        assert [engine.generate(_req(p, ["plain"])).raw_text for p in PROMPTS] == want["plain"]
        assert [engine.generate(_req(p, [])).raw_text for p in PROMPTS] == base


@pytest.fixture(scope="module")
def tied_model_path(tiny_model_path, tmp_path_factory) -> pathlib.Path:
    """The tiny model with its ``lm_head`` tied to the input embeddings: PEFT then gives
    trainable tokens a second, tied wrapper on ``lm_head``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest = tmp_path_factory.mktemp("tied")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.get_input_embeddings().weight
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(dest)
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("mixed_lora", ["fused", "peft"])
def test_trainable_tokens_on_tied_embeddings_serve_what_peft_gives(
    tied_model_path, tmp_path, mixed_lora
):
    """With tied embeddings PEFT wraps ``lm_head`` too, sharing the input side's deltas:
    both wrappers serve the other adapters' rows from the base layers."""
    from peft.utils.other import TrainableTokensWrapper

    plain = _made(tied_model_path, tmp_path / "plain", 12, target_modules="all-linear")
    tokens = _tokens_made(tied_model_path, tmp_path / "tokens", 13)
    with Engine.load(str(tied_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
        base = [engine.generate(_req(p, [])).raw_text for p in PROMPTS]
        engine.adapters.load(tokens, name="tokens")
        engine.adapters.load(plain, name="plain")
        wrapped = [
            n for n, m in engine.model.named_modules() if isinstance(m, TrainableTokensWrapper)
        ]
        assert [n.rsplit(".", 1)[-1] for n in wrapped] == ["embed_tokens", "lm_head"], wrapped
        want = {
            None: base,
            "plain": [_peft_reply(engine, tied_model_path, plain, p) for p in PROMPTS],
            "tokens": [_peft_reply(engine, tied_model_path, tokens, p) for p in PROMPTS],
        }
        assert want["tokens"] != base
        plan = ["plain", "tokens", None, "tokens", "plain", None]
        together = engine.generate_many(
            [_req(PROMPTS[i % 3], [n] if n else []) for i, n in enumerate(plan)]
        )
        assert [r.raw_text for r in together] == [want[n][i % 3] for i, n in enumerate(plan)]
        for name in want:
            alone = [engine.generate(_req(p, [name] if name else [])).raw_text for p in PROMPTS]
            assert alone == want[name], name


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


@pytest.mark.slow
def test_trainable_tokens_and_lora_on_one_layer_are_refused_either_way(tiny_model_path, tmp_path):
    """PEFT cannot put trainable tokens and LoRA on one layer: a tokens adapter loaded
    beside an embedding-LoRA one failed with a bare TypeError halfway through (its LoRA
    layers left in the model), the other way round with PEFT's dump of the layer and the
    advice to check the base model; and the wrapper stays after its adapter is unloaded."""
    emb = _made(tiny_model_path, tmp_path / "emb", 6, target_modules=["embed_tokens", "q_proj"])
    plain = _made(tiny_model_path, tmp_path / "plain", 7, target_modules=["v_proj"])
    tokens = _tokens_made(tiny_model_path, tmp_path / "tokens", 8)
    layer = r"'model\.embed_tokens'"
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        engine.adapters.load(emb, name="emb")
        want = engine.generate(_req(PROMPTS[0], ["emb"])).raw_text
        _refused_and_base_untouched(
            engine,
            tokens,
            rf"trainable tokens \(trainable_token_indices\) on {layer}, where loaded "
            r"adapter\(s\) \['emb'\] have LoRA; PEFT cannot stack.*Unload \['emb'\] first",
        )
        assert engine.generate(_req(PROMPTS[0], ["emb"])).raw_text == want
        engine.adapters.unload("emb")
        engine.adapters.load(tokens, name="tokens")
        _refused_and_base_untouched(
            engine,
            emb,
            rf"LoRA \(target_modules\) on {layer}, where loaded adapter\(s\) \['tokens'\]",
        )
        engine.adapters.load(plain, name="plain")
        engine.adapters.unload("tokens")
        _refused_and_base_untouched(
            engine, emb, r"PEFT still wraps for the trainable tokens of an adapter unloaded since"
        )
        engine.adapters.unload("plain")
        engine.adapters.load(emb, name="emb")  # as the message says: the model is unwrapped
        assert engine.generate(_req(PROMPTS[0], ["emb"])).raw_text == want


def test_an_adapter_with_only_modules_to_save_is_refused(tiny_model_path, kinds, tmp_path):
    """PEFT makes no adapter without LoRA layers, but one edited (or made by another tool)
    to ``target_modules=[]`` and ``modules_to_save`` used to reach PEFT, which refused it
    with advice about excluded modules and "check that it was trained for this base model"."""
    import json
    import shutil

    folder = pathlib.Path(shutil.copytree(kinds["head"], tmp_path / "only-head"))
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "target_modules": []}))
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        _refused_and_base_untouched(
            engine,
            folder,
            r"has no LoRA layers \(target_modules is empty, only modules_to_save=\['lm_head'\]\)"
            r".*Retrain it with target_modules",
        )


@pytest.mark.parametrize(
    ("setting", "value"),
    [("r", "4"), ("lora_alpha", "eight"), ("rank_pattern", [1]), ("layers_to_transform", "zero")],
)
@pytest.mark.parametrize("beside", [False, True])
def test_a_mistyped_config_peft_fails_on_halfway_is_refused(
    tiny_model_path, kinds, tmp_path, setting, value, beside
):
    """A mistyped value in adapter_config.json made PEFT raise TypeError (or
    AttributeError) halfway through the load, which came out of engine.adapters.load bare
    instead of as an AdapterError."""
    import json
    import shutil

    folder = pathlib.Path(shutil.copytree(kinds["attn0"], tmp_path / "typo"))
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, setting: value}))
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        if beside:
            engine.adapters.load(kinds["attn0"], name="attn0")
        other = engine.generate(_req(PROMPTS[0], ["attn0"] if beside else [])).raw_text
        _refused_and_base_untouched(engine, folder, r"PEFT could not load adapter .*typo")
        assert engine.generate(_req(PROMPTS[0], ["attn0"] if beside else [])).raw_text == other
        engine.adapters.load(kinds["attn0"], name="bad")  # the name was left free
        assert engine.generate(_req(PROMPTS[0], ["bad"])).ok


@pytest.mark.slow
def test_training_beside_and_into_a_trainable_tokens_adapter(tiny_model_path, tmp_path):
    """TrainingConfig makes plain LoRA only; a job beside a loaded trainable-tokens adapter
    could not save what it trained (PEFT asked the new adapter for token deltas), and a
    job continuing the tokens adapter trains its tokens too. Each then serves what PEFT
    gives for the folder it saved, and the others and the base model are unchanged."""
    from tests.engine.test_training import ROWS

    tokens = _tokens_made(tiny_model_path, tmp_path / "tokens", 11)

    def train(adapter: str, **kw: Any) -> pathlib.Path:
        config = TrainingConfig(
            adapter=adapter,
            dataset=ROWS,
            max_steps=3,
            batch_size=4,
            learning_rate=5e-2,
            output_dir=str(tmp_path / "out" / adapter),
            **kw,
        )
        return pathlib.Path(engine.train(config).result(120).path)

    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        engine.adapters.load(tokens, name="tokens")
        base = [engine.generate(_req(p, [])).raw_text for p in PROMPTS]
        before = [engine.generate(_req(p, ["tokens"])).raw_text for p in PROMPTS]
        qa = train("qa")
        want = [_peft_reply(engine, tiny_model_path, qa, p) for p in PROMPTS]
        assert [engine.generate(_req(p, ["qa"])).raw_text for p in PROMPTS] == want
        assert [engine.generate(_req(p, ["tokens"])).raw_text for p in PROMPTS] == before
        more = train("tokens", continue_training=True)
        after = [engine.generate(_req(p, ["tokens"])).raw_text for p in PROMPTS]
        assert after == [_peft_reply(engine, tiny_model_path, more, p) for p in PROMPTS]
        assert after != [_peft_reply(engine, tiny_model_path, tokens, p) for p in PROMPTS]
        assert [engine.generate(_req(p, ["qa"])).raw_text for p in PROMPTS] == want
        assert [engine.generate(_req(p, [])).raw_text for p in PROMPTS] == base
