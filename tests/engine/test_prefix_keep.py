# SPDX-License-Identifier: Apache-2.0
"""Adapters coming and going keep the prefix cache warm for the weights they leave alone.

Loading, unloading or training an adapter drops the blocks of that adapter (and of the
combinations holding it) only: the base model's blocks and the other adapters' are reused,
and a reused block is what a fresh engine computes, bit for bit (the first load wraps the
base model's layers in PEFT's LoRA layers, which compute a base row exactly as before, on
the fused path and on PEFT's own). A call that does not say what it changed still clears
everything.
"""

from __future__ import annotations

import pytest
import torch

from mp13_engine import Engine, Request, TrainingConfig
from mp13_engine._changes import EVERY_ADAPTER, EVERYTHING, NOTHING, WeightsChange

SYSTEM = "You are a careful helper. Answer briefly and say when you do not know. " * 4
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi there"}]
ROWS = [
    {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
    for q, a in [("Capital of Zorbia?", "Flumptown."), ("Colour of moonfruit?", "Silver.")]
]
MODES = ["fused", "peft"]
#: Adapters of other kinds: LoRA on the embeddings (factors only), and one that saved
#: lm_head whole (modules_to_save: base modules swapped for wrappers).
OTHER_KINDS = {
    "emb": {"target_modules": ["embed_tokens", "q_proj"]},
    "head": {"target_modules": ["q_proj"], "modules_to_save": ["lm_head"]},
}


def _ask(engine, adapters=None):
    return engine.generate(Request(messages=CHAT, max_new_tokens=6, adapters=adapters))


def _blocks(engine, adapter: str) -> dict[tuple[int, ...], tuple[torch.Tensor, ...]]:
    """The cached blocks of rows on ``adapter``, by their token path (read between steps)."""
    out = {}
    for owner, root in engine._prefix._roots.items():
        if owner.adapter != adapter:
            continue
        stack = [((), root)]
        while stack:
            path, node = stack.pop()
            for key, child in node.children.items():
                out[path + key] = child.kv
                stack.append((path + key, child))
    return out


@pytest.fixture(scope="module")
def kinds(tiny_model_path, tmp_path_factory):
    from tests.engine.test_adapters_peft_kinds import _made

    root = tmp_path_factory.mktemp("prefix-keep-kinds")
    return {n: _made(tiny_model_path, root / n, 7, **kw) for n, kw in OTHER_KINDS.items()}


@pytest.fixture(scope="module")
def fresh(tiny_model_path, adapter_dir):
    """Greedy texts of fresh engines, no prefix cache: the base model alone, then each adapter."""
    out = {}
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0) as engine:
        out["base"] = _ask(engine).raw_text
        for name in ("a", "b"):
            engine.adapters.load(str(adapter_dir / name), name=name)
            out[name] = _ask(engine, [name]).raw_text
            engine.adapters.unload(name)
    return out


@pytest.mark.parametrize("mixed_lora", MODES)
def test_base_rows_compute_the_same_kv_bit_for_bit_once_the_model_is_wrapped(
    tiny_model_path, adapter_dir, kinds, mixed_lora
):
    folders = {"a": adapter_dir / "a", "b": adapter_dir / "b", "emb": kinds["emb"]}
    kv = {}
    for loaded in ((), ("a",), ("a", "b"), ("emb",)):
        with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
            for name in loaded:
                engine.adapters.load(str(folders[name]), name=name)
            _ask(engine)
            engine._run_on_worker(engine._note_change, NOTHING)  # after the row's insert
            kv[loaded] = _blocks(engine, "__base__")
    assert kv[()]
    for loaded in (("a",), ("a", "b"), ("emb",)):
        assert kv[loaded].keys() == kv[()].keys(), loaded
        for path, layers in kv[()].items():
            assert all(torch.equal(x, y) for x, y in zip(layers, kv[loaded][path], strict=True))


def test_an_adapter_that_swaps_base_modules_empties_the_whole_cache(
    tiny_model_path, adapter_dir, kinds, fresh
):
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        engine.adapters.load(str(adapter_dir / "a"), name="a")
        _ask(engine)
        _ask(engine, ["a"])
        engine.adapters.load(str(kinds["head"]), name="head")  # lm_head in a wrapper now
        assert engine.metrics().prefix_cache.blocks == 0
        base = _ask(engine)
        assert _ask(engine).metrics.cached_tokens > 0
        engine.adapters.unload("head")
        assert engine.metrics().prefix_cache.blocks == 0
        again = _ask(engine)
    assert base.metrics.cached_tokens == again.metrics.cached_tokens == 0
    assert base.raw_text == again.raw_text == fresh["base"]


@pytest.mark.parametrize("mixed_lora", MODES)
def test_loading_and_unloading_adapters_keeps_the_blocks_of_the_others(
    tiny_model_path, adapter_dir, fresh, mixed_lora
):
    with Engine.load(str(tiny_model_path), device="cpu", mixed_lora=mixed_lora) as engine:
        assert _ask(engine).raw_text == fresh["base"]
        engine.adapters.load(str(adapter_dir / "a"), name="a")  # the first load wraps the model
        base = _ask(engine)
        assert base.metrics.cached_tokens > 0 and base.raw_text == fresh["base"]
        assert _ask(engine, ["a"]).raw_text == fresh["a"]
        for step in ("load b", "unload b"):
            if step == "load b":
                engine.adapters.load(str(adapter_dir / "b"), name="b")
            else:
                engine.adapters.unload("b")
            before = engine.metrics().prefix_cache
            base, on_a = _ask(engine), _ask(engine, ["a"])
            after = engine.metrics().prefix_cache
            assert base.metrics.cached_tokens > 0 and base.raw_text == fresh["base"], step
            assert on_a.metrics.cached_tokens > 0 and on_a.raw_text == fresh["a"], step
            assert after.hits - before.hits == 2, step
            assert after.tokens_saved - before.tokens_saved == (
                base.metrics.cached_tokens + on_a.metrics.cached_tokens
            )
        engine.adapters.unload("a")  # the last adapter: the model is unwrapped
        base = _ask(engine)
        assert base.metrics.cached_tokens > 0 and base.raw_text == fresh["base"]


def test_an_adapter_loaded_again_and_its_combinations_are_computed_afresh(
    tiny_model_path, adapter_dir, fresh
):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        engine.adapters.load("b")
        both = _ask(engine, ["a", "b"])
        assert _ask(engine, ["a", "b"]).metrics.cached_tokens > 0
        for adapters in (None, ["a"], ["b"]):
            _ask(engine, adapters)
        engine.adapters.unload("b")
        assert {o.adapter for o in engine._prefix._roots} == {"__base__", "a"}
        engine.adapters.load(str(adapter_dir / "a"), name="b")  # "b" now holds other weights
        on_b = _ask(engine, ["b"])
        combined = _ask(engine, ["a", "b"])
        on_a = _ask(engine, ["a"])
    assert on_b.metrics.cached_tokens == 0 and on_b.raw_text == fresh["a"]
    assert combined.metrics.cached_tokens == 0 and combined.raw_text != both.raw_text
    assert on_a.metrics.cached_tokens > 0 and on_a.raw_text == fresh["a"]


def test_training_a_new_adapter_keeps_the_base_models_and_the_other_adapters_blocks(
    tiny_model_path, adapter_dir, fresh, tmp_path
):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        _ask(engine)
        _ask(engine, ["a"])
        config = TrainingConfig(
            adapter="t",
            dataset=ROWS,
            max_steps=2,
            batch_size=2,
            learning_rate=5e-3,
            output_dir=str(tmp_path / "t"),
        )
        job = engine.train(config)
        assert job.result(timeout=120).steps == 2
        base, on_a = _ask(engine), _ask(engine, ["a"])
        on_t = _ask(engine, ["t"])
        on_t2 = _ask(engine, ["t"])
    assert base.metrics.cached_tokens > 0 and base.raw_text == fresh["base"]
    assert on_a.metrics.cached_tokens > 0 and on_a.raw_text == fresh["a"]
    assert on_t.metrics.cached_tokens == 0
    assert on_t2.metrics.cached_tokens > 0 and on_t2.raw_text == on_t.raw_text


def test_a_call_that_does_not_say_what_it_changed_clears_the_whole_cache(
    tiny_model_path, adapter_dir
):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        _ask(engine)
        _ask(engine, ["a"])
        engine._run_on_worker(engine._note_change, NOTHING)  # says: nothing changed
        kept = engine.metrics().prefix_cache.blocks
        assert kept > 0
        engine._run_on_worker(engine.adapters.list)  # read-only, but does not say so
        assert engine.metrics().prefix_cache.blocks == 0
        assert _ask(engine).metrics.cached_tokens == 0


def test_what_a_change_makes_stale():
    on_a, combo = frozenset({"a"}), frozenset({"__combo__a+b", "a", "b"})
    assert all(EVERYTHING.touches(n) for n in (frozenset(), on_a, combo))
    assert not EVERY_ADAPTER.touches(frozenset()) and EVERY_ADAPTER.touches(on_a)
    b = WeightsChange.of_adapters("b")
    assert not b.touches(frozenset()) and not b.touches(on_a) and b.touches(combo)
    assert not NOTHING.touches(combo)
    assert (b | NOTHING) == b and (b | EVERYTHING).base
    assert (b | WeightsChange.of_adapters("a")).adapters == {"a", "b"}
