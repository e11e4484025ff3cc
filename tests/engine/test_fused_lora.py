# SPDX-License-Identifier: Apache-2.0
"""Fused mixed-adapter LoRA: equal to PEFT's per-adapter loop, and it steps aside when it must."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_engine import ConfigError, Engine, EngineConfig, Request, _fused_lora
from mp13_engine._fused_lora import FusedLora
from mp13_engine._types import BASE_ADAPTER

ROWS = [BASE_ADAPTER, "a", "b", "a", "c", BASE_ADAPTER, "b", "c"]
PROMPTS = ["Hello there", "What is a cat?", "Tell me a story", "Count to three", "Why?"]


def _lora(**overrides):
    from peft import LoraConfig

    settings = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "init_lora_weights": False}
    settings.update(overrides)
    return LoraConfig(**settings)


def _peft_model(path, configs: dict):
    """A PeftModel holding one adapter per entry of ``configs`` (random, non-zero weights)."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = None
    with torch.random.fork_rng():
        torch.manual_seed(7)
        for name, config in configs.items():
            if model is None:
                base = AutoModelForCausalLM.from_pretrained(path)
                model = get_peft_model(base, config, adapter_name=name)
            else:
                model.add_adapter(name, config)
    model.eval()
    return model


def _batch(rows: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (rows, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # one left-padded row
    return {"input_ids": ids, "attention_mask": mask}


def _logits_peft(model, rows):
    with torch.inference_mode():
        return model(**_batch(len(rows)), adapter_names=list(rows)).logits


def _logits_fused(model, rows):
    plan = FusedLora().plan(model, rows)
    assert plan is not None
    with torch.inference_mode(), plan.installed():
        return model(**_batch(len(rows)), adapter_names=[BASE_ADAPTER] * len(rows)).logits


@pytest.fixture(scope="module")
def three(tiny_model_path):
    return _peft_model(
        tiny_model_path,
        {"a": _lora(), "b": _lora(r=2, lora_alpha=3), "c": _lora(r=8, use_rslora=True)},
    )


def test_fused_logits_equal_peft_row_by_row(three):
    expected = _logits_peft(three, ROWS)
    got = _logits_fused(three, ROWS)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # The base rows get exactly the base model.
    assert torch.equal(got[0], expected[0]) and torch.equal(got[5], expected[5])


def test_fused_single_adapter_wave_equals_peft(three):
    rows = ["c"] * 4
    torch.testing.assert_close(
        _logits_fused(three, rows), _logits_peft(three, rows), rtol=1e-4, atol=1e-4
    )


def test_hooks_are_removed_even_when_the_wave_fails(three):
    plan = FusedLora().plan(three, ROWS)
    assert plan is not None and len(plan.layers) > 0
    with pytest.raises(ValueError, match="boom"), plan.installed():
        assert all(len(layer.module._forward_hooks) == 1 for layer in plan.layers)
        raise ValueError("boom")
    assert all(len(layer.module._forward_hooks) == 0 for layer in plan.layers)


def test_a_batch_of_another_size_is_refused_clearly(three):
    plan = FusedLora().plan(three, ROWS)
    with torch.inference_mode(), plan.installed(), pytest.raises(RuntimeError, match="8 rows"):
        three(**_batch(3), adapter_names=[BASE_ADAPTER] * 3)


def test_a_spread_plan_adds_each_row_delta_to_each_of_its_packed_tokens(three):
    """Packed: row i's tokens lie side by side in one input row; each gets row i's delta."""
    plan = FusedLora().plan(three, ROWS)
    tokens = torch.tensor([1, 3, 1, 5, 2, 1, 4, 1])
    spread = plan.spread(tokens)
    gen = torch.Generator().manual_seed(1)
    for layer, packed in zip(plan.layers, spread.layers, strict=True):
        x = torch.randn(len(ROWS), 5, layer.a_cat.shape[1], generator=gen)
        zero = torch.zeros(len(ROWS), 5, layer.b_cat.shape[0])
        by_row = layer.hook(layer.module, (x,), zero)
        flat = torch.cat([x[i, : int(n)] for i, n in enumerate(tokens)]).unsqueeze(0)
        got = packed.hook(layer.module, (flat,), torch.zeros(1, flat.shape[1], zero.shape[2]))
        expected = torch.cat([by_row[i, : int(n)] for i, n in enumerate(tokens)]).unsqueeze(0)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # Layers that shared a row table share the spread one (one copy per table, not per layer).
    tables = {id(layer.row_weights) for layer in spread.layers}
    assert len(tables) == len({id(layer.row_weights) for layer in plan.layers})


def test_a_spread_plan_refuses_another_layout_clearly(three):
    plan = FusedLora().plan(three, ROWS)
    with pytest.raises(ValueError, match="8 rows cannot be spread over 3"):
        plan.spread(torch.tensor([1, 1, 1]))
    spread = plan.spread(torch.ones(len(ROWS), dtype=torch.long))
    layer = spread.layers[0]
    x = torch.zeros(1, 5, layer.a_cat.shape[1])
    with pytest.raises(RuntimeError, match="spread over 8 packed tokens"):
        layer.hook(layer.module, (x,), torch.zeros(1, 5, layer.b_cat.shape[0]))


def test_all_base_wave_needs_no_plan(three):
    assert FusedLora().plan(three, [BASE_ADAPTER] * 3) is None


def test_plan_does_not_touch_adapter_state(three):
    before = {n: p.requires_grad for n, p in three.named_parameters()}
    active = three.active_adapters
    _logits_fused(three, ROWS)
    assert {n: p.requires_grad for n, p in three.named_parameters()} == before
    assert three.active_adapters == active


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param({"use_dora": True}, id="dora"),
        pytest.param({"lora_bias": True}, id="lora-bias"),
        pytest.param({"target_modules": ["q_proj", "embed_tokens"]}, id="embedding"),
    ],
)
def test_waves_that_cannot_be_fused_fall_back_to_peft(tiny_model_path, odd):
    model = _peft_model(tiny_model_path, {"a": _lora(), "odd": _lora(**odd)})
    fused = FusedLora()
    assert fused.plan(model, ["a", "odd", BASE_ADAPTER]) is None
    assert fused.plan(model, ["a", BASE_ADAPTER]) is not None  # the odd one is not in this wave


def test_too_many_columns_fall_back_to_peft(three, monkeypatch):
    monkeypatch.setattr(_fused_lora, "MAX_FUSED_RANK", 10)  # a + b + c = 14 columns
    fused = FusedLora()
    assert fused.plan(three, ROWS) is None
    assert fused.plan(three, ["a", "b"]) is not None  # 6 columns


def test_layer_cache_follows_the_model_and_its_adapters(tiny_model_path):
    model = _peft_model(tiny_model_path, {"a": _lora(target_modules=["q_proj"])})
    fused = FusedLora()
    first = fused.modules(model)
    assert fused.modules(model) is first
    model.add_adapter("b", _lora(target_modules=["q_proj", "v_proj"]))
    assert len(fused.modules(model).lora) > len(first.lora)


def _wave_requests():
    plan = [[], ["a"], ["b"], ["a"], ["b"], ["__base__"], ["a"], ["a", "b"]]
    return [
        Request(
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            adapters=ad,
            max_new_tokens=10,
        )
        for i, ad in enumerate(plan)
    ]


def test_engine_fused_and_peft_waves_agree(tiny_model_path, tmp_path, monkeypatch):
    from tests.engine.test_adapters import _peft_adapter

    _peft_adapter(tiny_model_path, tmp_path / "a", seed=1)
    _peft_adapter(tiny_model_path, tmp_path / "b", seed=2, r=2)
    used = []

    real = FusedLora.plan

    def spy(self, model, rows):
        plan = real(self, model, rows)
        used.append(plan is not None)
        return plan

    monkeypatch.setattr(FusedLora, "plan", spy)
    outputs = {}
    for mode in ("peft", "fused"):
        used.clear()
        with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mode) as engine:
            engine.adapters.load(tmp_path / "a")
            engine.adapters.load(tmp_path / "b")
            outputs[mode] = [r.raw_text for r in engine.generate_many(_wave_requests())]
        assert any(used) is (mode == "fused")
    assert outputs["fused"] == outputs["peft"]


def test_mixed_lora_setting_is_validated():
    with pytest.raises(ConfigError, match="mixed_lora"):
        EngineConfig(model="m", mixed_lora="fast")


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param({"modules_to_save": ["lm_head"]}, id="modules-to-save"),
        pytest.param({"trainable_token_indices": [5, 6]}, id="trainable-tokens"),
    ],
)
def test_adapters_with_extra_trained_modules_fall_back_to_peft(tiny_model_path, odd):
    model = _peft_model(tiny_model_path, {"a": _lora(), "odd": _lora(**odd)})
    fused = FusedLora()
    assert fused.modules(model).others, "the extra trained module is found"
    assert fused.plan(model, ["a", "odd"]) is None
    assert fused.plan(model, ["a", BASE_ADAPTER]) is not None


def test_a_repeated_mix_reuses_its_concatenated_weights(three):
    fused = FusedLora()
    first = fused.plan(three, ROWS)
    again = fused.plan(three, list(reversed(ROWS)))  # the same set of adapters
    assert all(x.a_cat is y.a_cat for x, y in zip(first.layers, again.layers, strict=True))


def test_weights_changed_in_place_are_never_served_stale(tiny_model_path):
    model = _peft_model(tiny_model_path, {"a": _lora(), "b": _lora(r=2)})
    fused = FusedLora()
    fused.plan(model, ["a", "b"])  # cache the concatenation
    with torch.no_grad():  # what an optimizer step does to a trained adapter
        for name, param in model.named_parameters():
            if "lora_B.a" in name:
                param.mul_(3.0)
    plan = fused.plan(model, ["a", "b"])
    with torch.inference_mode(), plan.installed():
        got = model(**_batch(2), adapter_names=[BASE_ADAPTER] * 2).logits
    torch.testing.assert_close(got, _logits_peft(model, ["a", "b"]), rtol=1e-4, atol=1e-4)


def test_only_the_most_recent_adapter_sets_are_kept(three):
    fused = FusedLora(max_sets=2)
    for rows in (["a", "b"], ["a", "c"], ["b", "c"]):
        fused.plan(three, rows)
    assert list(fused._sets) == [("a", "c"), ("b", "c")]


def test_in_bfloat16_fused_is_as_close_to_float32_as_peft(tiny_model_path):
    """Half precision rounds the two paths differently; neither may be the worse one."""
    model = _peft_model(
        tiny_model_path,
        {"a": _lora(), "b": _lora(r=2, lora_alpha=3), "c": _lora(r=8, use_rslora=True)},
    )
    truth = _logits_peft(model, ROWS).float()
    model = model.to(torch.bfloat16)
    peft_error = (_logits_peft(model, ROWS).float() - truth).abs().mean()
    fused_error = (_logits_fused(model, ROWS).float() - truth).abs().mean()
    assert fused_error <= peft_error * 1.25


# --- history independence through the engine -------------------------------------------------
#
# Whatever was loaded, unloaded, combined and served before, a wave must give exactly what a
# fresh engine holding the same adapters gives. Both run the fused path on the same weights, so
# the outputs are bit-equal unless a cache serves stale weights.

POOL = ("a", "b", "c")


@pytest.fixture(scope="module")
def pool_dirs(tiny_model_path, tmp_path_factory):
    from tests.engine.test_adapters import _peft_adapter

    root = tmp_path_factory.mktemp("pool")
    for seed, (name, rank) in enumerate(zip(POOL, (4, 2, 8), strict=True)):
        _peft_adapter(tiny_model_path, root / name, seed=10 + seed, r=rank)
    return root


@pytest.fixture(scope="module")
def long_lived(tiny_model_path, pool_dirs):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(pool_dirs)) as engine:
        yield engine


def _rows_for(loaded: list[str], choices: list[int]) -> list[Request]:
    options = [[], *([n] for n in loaded)]
    options += [[x, y] for i, x in enumerate(loaded) for y in loaded[i + 1 :]]
    return [
        Request(
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            adapters=options[c % len(options)],
            max_new_tokens=4,
        )
        for i, c in enumerate(choices)
    ]


_OP = st.one_of(
    st.tuples(st.just("load"), st.sampled_from(POOL)),
    st.tuples(st.just("unload"), st.sampled_from(POOL)),
    st.tuples(
        st.just("combine"),
        st.sampled_from([("a", "b"), ("a", "c"), ("b", "c")]),
        st.sampled_from([(1.0, 1.0), (2.0, -1.0), (0.5, 0.5)]),
    ),
    st.tuples(st.just("wave"), st.lists(st.integers(0, 20), min_size=1, max_size=4)),
    # every row on one choice: the wave's only adapter is served from its live weights
    st.tuples(st.just("wave"), st.integers(0, 20).map(lambda c: [0, c, c])),
)
_FINAL = st.one_of(
    st.lists(st.integers(0, 20), min_size=4, max_size=4),
    st.integers(0, 20).map(lambda c: [0, c, c, c]),
)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(ops=st.lists(_OP, min_size=2, max_size=8), final=_FINAL)
def test_a_wave_does_not_depend_on_the_adapter_history(
    tiny_model_path, pool_dirs, long_lived, ops, final
):
    engine = long_lived
    for op in ops:
        loaded = [i.name for i in engine.adapters.list()]
        if op[0] == "load" and op[1] not in loaded:
            engine.adapters.load(op[1])
        elif op[0] == "unload" and op[1] in loaded:
            engine.adapters.unload(op[1])
        elif op[0] == "combine" and set(op[1]) <= set(loaded):
            engine.adapters.combine(list(op[1]), list(op[2]))
        elif op[0] == "wave" and loaded:
            engine.generate_many(_rows_for(loaded, op[1]))
    loaded = [i.name for i in engine.adapters.list()]
    weights = dict(engine.adapters._state.weights)
    wave = _rows_for(loaded, final)
    got = [r.raw_text for r in engine.generate_many(wave)]
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(pool_dirs)) as fresh:
        for name in loaded:
            fresh.adapters.load(name)
        for names, w in weights.items():
            order = sorted(names)
            fresh.adapters.combine(order, [w[n] for n in order])
        expected = [r.raw_text for r in fresh.generate_many(wave)]
    assert got == expected
