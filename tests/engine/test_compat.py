# SPDX-License-Identifier: Apache-2.0
"""Canaries for ``mp13_engine._compat``: one test per workaround of a library's internals.

Each test checks both halves: that the library still behaves the way the
workaround assumes (so the workaround is still needed and still aimed right),
and that the workaround does its job. When one fails after an upgrade of peft,
bitsandbytes or torch, read the matching paragraph of ``_compat``'s docstring:
either adapt the workaround or, if the library fixed the problem, drop it.
"""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

from mp13_engine import _compat

TINY_PEFT = "peft changed under mp13_engine._compat"


def _lora(**overrides):
    from peft import LoraConfig

    settings = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "init_lora_weights": False}
    settings.update(overrides)
    return LoraConfig(**settings)


def _base(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


def _wrapped(path, **adapters):
    from peft import get_peft_model

    model = None
    for name, config in adapters.items():
        if model is None:
            model = get_peft_model(_base(path), config, adapter_name=name)
        else:
            model.add_adapter(name, config)
    return model


@pytest.fixture(scope="module")
def two(tiny_model_path):
    """A PeftModel with plain LoRA adapters "x" (r=4, alpha=8) and "b" (r=2, alpha=3).

    Not "a": PEFT warns (rightly) that a name contained in its prefix "lora_" may be
    reinitialised on loading."""
    return _wrapped(tiny_model_path, x=_lora(), b=_lora(r=2, lora_alpha=3))


# ----- PEFT: the wrapper


def test_is_peft_model_tells_a_wrapper_from_a_plain_model(tiny_model_path, two):
    assert _compat.is_peft_model(two)
    assert not _compat.is_peft_model(_base(tiny_model_path))


def test_the_base_model_is_found_while_the_active_adapter_is_stale(tiny_model_path):
    """``get_base_model()`` looks up the active adapter's config; the workaround does not."""
    model = _wrapped(tiny_model_path, x=_lora(), b=_lora())
    inner = model.base_model.model
    model.active_adapter = "gone"  # the state a deletion can leave behind (next test)
    with pytest.raises(KeyError):
        model.get_base_model()  # if this stops failing, peft_base_model may use it again
    assert _compat.peft_base_model(model) is inner
    plain = _base(tiny_model_path)
    assert _compat.peft_base_model(plain) is plain


def test_deleting_keeps_a_stale_active_adapter_until_repointed(tiny_model_path):
    model = _wrapped(tiny_model_path, x=_lora(), b=_lora())
    model.base_model.set_adapter([])  # no layer-level adapter active (mixed batches do this)
    model.delete_adapter("x")
    # What the workaround is for: PEFT still names the deleted adapter.
    assert model.active_adapter == "x", f"{TINY_PEFT}: delete_adapter now re-points itself"
    _compat.repoint_active_adapter(model)
    assert model.active_adapter == "b"
    _compat.repoint_active_adapter(model)  # a valid name is left alone
    assert model.active_adapter == "b"


def test_a_failed_wrap_is_undone(tiny_model_path, tmp_path, monkeypatch):
    """PEFT changes a plain model in place before loading weights; undo leaves no trace."""
    import peft.peft_model
    from peft import PeftModelForCausalLM
    from peft.tuners.tuners_utils import BaseTunerLayer

    saved = tmp_path / "lora"
    _wrapped(tiny_model_path, default=_lora()).save_pretrained(saved)
    model = _base(tiny_model_path)
    next(model.parameters()).requires_grad_(False)  # a state the undo must restore, not reset
    grads = [p.requires_grad for p in model.parameters()]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    def broken(*args, **kwargs):
        raise RuntimeError("simulated failure while loading the weights")

    monkeypatch.setattr(peft.peft_model, "set_peft_model_state_dict", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        PeftModelForCausalLM.from_pretrained(model, str(saved))
    # What the workaround is for: the failed wrap left layers and a config behind.
    assert any(isinstance(m, BaseTunerLayer) for m in model.modules()), TINY_PEFT
    assert "peft_config" in model.__dict__, f"{TINY_PEFT}: peft_config is stored elsewhere"

    _compat.undo_failed_wrap(model, grads)
    assert not any(isinstance(m, BaseTunerLayer) for m in model.modules())
    assert not hasattr(model, "peft_config")
    assert [p.requires_grad for p in model.parameters()] == grads
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    assert all(torch.equal(after[n], before[n]) for n in before)


def test_a_modules_to_save_copy_is_looked_up_for_every_row_until_lent(tiny_model_path):
    """PEFT's wrapper fails rows on an adapter without a copy of the module; lent the
    original, each row gets what it gets alone, and no loan outlives the forward."""
    model = _wrapped(
        tiny_model_path,
        x=_lora(),
        head=_lora(target_modules=["q_proj"], modules_to_save=["lm_head"]),
    ).eval()
    wrapper = _compat.peft_base_model(model).lm_head
    with torch.no_grad():
        wrapper.modules_to_save["head"].weight.add_(0.5)  # its own head differs
    ids = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    rows = ["x", "head", "__base__"]
    with pytest.raises(KeyError, match="'x'"):  # PEFT has no fallback (fixed it?)
        model(input_ids=ids, adapter_names=rows)
    _compat.drop_leaked_forward_hooks(model)
    hooked: set[object] = set()
    _compat.lend_originals_to_other_adapters(model, hooked)
    _compat.lend_originals_to_other_adapters(model, hooked)  # once per wrapper
    assert hooked == {wrapper} and len(wrapper._forward_pre_hooks) == 1
    with torch.no_grad():
        mixed = model(input_ids=ids, adapter_names=rows).logits
        alone = [
            model(input_ids=ids[i : i + 1], adapter_names=[n]).logits for i, n in enumerate(rows)
        ]
    for i, logits in enumerate(alone):
        torch.testing.assert_close(mixed[i : i + 1], logits)
    assert not torch.allclose(alone[0], alone[1])  # the head row really used its own head
    assert set(wrapper.modules_to_save) == {"head"}
    assert not any(".modules_to_save.x." in key for key in model.state_dict())


def test_a_trainable_tokens_delta_is_looked_up_for_every_row_until_served_the_original(
    tiny_model_path,
):
    """PEFT's trainable-tokens wrapper fails rows on an adapter without token deltas;
    served the original layer, each row gets what it gets alone, and nothing is stored."""
    model = _wrapped(
        tiny_model_path,
        x=_lora(),
        tok=_lora(
            target_modules=["q_proj"],
            init_lora_weights=True,
            trainable_token_indices=[1, 2, 3, 4, 5, 6],
        ),
    ).eval()
    wrapper = _compat.peft_base_model(model).model.embed_tokens
    with torch.no_grad():
        wrapper.token_adapter.trainable_tokens_delta["tok"].add_(0.5)  # its tokens differ
    before = set(model.state_dict())
    ids = torch.tensor([[1, 2, 3], [4, 5, 6], [1, 5, 9]])
    rows = ["x", "tok", "__base__"]
    with pytest.raises(KeyError, match="'x'"):  # PEFT has no fallback (fixed it?)
        model(input_ids=ids, adapter_names=rows)
    _compat.drop_leaked_forward_hooks(model)
    hooked: set[object] = set()
    _compat.lend_originals_to_other_adapters(model, hooked)
    _compat.lend_originals_to_other_adapters(model, hooked)  # once per wrapper
    assert hooked == {wrapper}
    with torch.no_grad():
        mixed = model(input_ids=ids, adapter_names=rows).logits
        alone = [
            model(input_ids=ids[i : i + 1], adapter_names=[n]).logits for i, n in enumerate(rows)
        ]
        untokened = model(input_ids=ids[1:2], adapter_names=["__base__"]).logits
    for i, logits in enumerate(alone):
        torch.testing.assert_close(mixed[i : i + 1], logits)
    assert not torch.allclose(alone[1], untokened)  # the tok row really used its tokens
    assert set(wrapper.token_adapter.trainable_tokens_delta) == {"tok"}
    assert set(model.state_dict()) == before


def test_a_trainable_tokens_wrapper_blocks_loading_and_saving_other_adapters_until_hooked(
    tiny_model_path, tmp_path
):
    """PEFT's trainable-tokens wrapper names token deltas for every adapter when a state
    dict is loaded or saved: no adapter without tokens could be loaded or saved after it."""
    from peft import get_peft_model_state_dict

    _wrapped(tiny_model_path, plain=_lora()).save_pretrained(tmp_path, selected_adapters=["plain"])
    tokens = _lora(target_modules=["q_proj"], trainable_token_indices=[1, 2, 3])
    model = _wrapped(tiny_model_path, tok=tokens, x=_lora()).eval()
    with pytest.raises(KeyError, match="trainable_tokens_delta"):  # PEFT checks (fixed it?)
        get_peft_model_state_dict(model, adapter_name="x")
    with pytest.raises(KeyError, match="trainable_tokens_delta"):
        model.load_adapter(str(tmp_path / "plain"), adapter_name="plain")
    model.delete_adapter("plain")  # what PEFT's failed load left behind
    _compat.lend_originals_to_other_adapters(model, set())
    saved = get_peft_model_state_dict(model, adapter_name="x")
    assert saved and not any("token_adapter" in key for key in saved)
    model.load_adapter(str(tmp_path / "plain"), adapter_name="plain")
    assert "plain" in model.peft_config
    own = get_peft_model_state_dict(model, adapter_name="tok")
    assert [k for k in own if "trainable_tokens_delta" in k], "the tokens adapter kept its deltas"


def test_trainable_tokens_and_lora_on_one_layer_are_found_before_peft_fails_halfway(
    tiny_model_path,
):
    """PEFT injects an adapter's LoRA layers, then fails to wrap a LoRA layer for its
    trainable tokens (TypeError); ``token_layer_clashes`` finds that layer first."""
    tokens = _lora(target_modules=["q_proj"], trainable_token_indices=[1, 2, 3])
    model = _wrapped(tiny_model_path, emb=_lora(target_modules=["embed_tokens"]))
    assert _compat.token_layer_clashes(model, tokens) == {"model.embed_tokens": {"emb"}}
    assert _compat.token_layer_clashes(model, _lora()) == {}  # all-linear: no embeddings
    assert _compat.token_layer_clashes(_base(tiny_model_path), tokens) == {}
    with pytest.raises(TypeError, match="trainable_token_indices cannot be applied"):
        model.add_adapter("tok", tokens)  # PEFT refuses it up front now (fixed it?)
    model = _wrapped(tiny_model_path, tok=tokens)
    emb = _lora(target_modules=["embed_tokens"])
    assert _compat.token_layer_clashes(model, emb) == {"model.embed_tokens": {"tok"}}
    assert _compat.token_layer_clashes(model, tokens) == {}  # tokens beside tokens: fine


# ----- PEFT: LoRA layers (the fused mixed-adapter path)


def test_a_failed_forward_leaves_peft_hooks_that_are_then_dropped(tiny_model_path):
    """PEFT removes its per-forward ``adapter_names`` hooks without ``finally``."""
    model = _wrapped(tiny_model_path, x=_lora()).eval()
    layer = _compat.peft_base_model(model).model.layers[0]

    def fail(module, args, kwargs):
        raise RuntimeError("fault inside the forward")

    handle = layer.register_forward_pre_hook(fail, with_kwargs=True)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(RuntimeError, match="fault inside"):
        model(input_ids=ids, adapter_names=["x", "__base__"])
    handle.remove()
    leaked = _compat.drop_leaked_forward_hooks(model)
    assert leaked > 0, f"{TINY_PEFT}: a failed forward left no hooks (PEFT fixed it?)"
    assert _compat.drop_leaked_forward_hooks(model) == 0
    model(input_ids=ids[:1])  # no stale adapter_names: a batch of another size works
    assert _compat.drop_leaked_forward_hooks(_base(tiny_model_path)) == 0


def test_tuner_modules_and_adapter_names(tiny_model_path, two):
    found = _compat.peft_tuner_modules(two)
    assert found.lora and not found.others
    assert _compat.peft_adapter_names(two) == {"x", "b"}
    assert _compat.peft_adapter_names(_base(tiny_model_path)) == frozenset()
    saving = _wrapped(tiny_model_path, x=_lora(modules_to_save=["lm_head"]))
    assert _compat.peft_tuner_modules(saving).others, f"{TINY_PEFT}: modules_to_save not found"


def test_lora_factors_scaling_and_plainness_are_read_as_peft_computes_them(two):
    layer = _compat.peft_tuner_modules(two).lora[0]
    assert _compat.lora_names(layer) == {"x", "b"}
    for name, rank, alpha in (("x", 4, 8), ("b", 2, 3)):
        a, b = _compat.lora_weights(layer, name)
        assert a.shape == (rank, layer.in_features) and b.shape == (layer.out_features, rank)
        assert _compat.lora_scaling(layer, name) == pytest.approx(alpha / rank)
        assert _compat.is_plain_linear_lora(layer, name)
        assert _compat.holds_adapter(layer, name)
        assert not _compat.holds_adapter(layer, name, skip=("lora_A", "lora_B"))
    # The layer's delta is exactly B(A(x)) * scaling: what the fused path computes.
    x = torch.randn(3, layer.in_features)
    two.base_model.set_adapter("x")
    with torch.no_grad():
        a, b = _compat.lora_weights(layer, "x")
        delta = layer(x) - layer.get_base_layer()(x)
        torch.testing.assert_close(delta, (x @ a.T @ b.T) * _compat.lora_scaling(layer, "x"))


def _not_plain_somewhere(model, name: str) -> bool:
    """What the fused path asks of every LoRA layer before it fuses adapter ``name``."""
    for layer in _compat.peft_tuner_modules(model).lora:
        if name in _compat.lora_names(layer):
            if not _compat.is_plain_linear_lora(layer, name):
                return True
        elif _compat.holds_adapter(layer, name):  # kept in another form (embedding LoRA)
            return True
    return False


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param({"use_dora": True}, id="dora"),
        pytest.param(
            {"lora_bias": True},
            id="lora-bias",
            # PEFT's true remark on this deliberate config: the tiny model's Linears have no bias
            marks=pytest.mark.filterwarnings("ignore:`lora_bias=True` was passed:UserWarning"),
        ),
        pytest.param({"target_modules": ["q_proj", "embed_tokens"]}, id="embedding"),
    ],
)
def test_lora_that_is_not_plain_is_recognised(tiny_model_path, odd):
    model = _wrapped(tiny_model_path, x=_lora(), odd=_lora(**odd))
    assert _not_plain_somewhere(model, "odd"), f"{TINY_PEFT}: {odd} looks like plain LoRA"
    assert not _not_plain_somewhere(model, "x")


def test_merged_weights_are_not_plain(tiny_model_path):
    model = _wrapped(tiny_model_path, x=_lora())
    model.merge_adapter()
    layer = _compat.peft_tuner_modules(model).lora[0]
    assert not _compat.is_plain_linear_lora(layer, "x")
    model.unmerge_adapter()
    assert _compat.is_plain_linear_lora(layer, "x")


# ----- torch


# ----- transformers: the KV cache of the step loop


def test_cache_layer_types_name_each_layers_kind():
    from transformers import AutoConfig

    assert set(_compat.cache_layer_types(AutoConfig.for_model("gemma2"))) == {
        "full_attention",
        "sliding_attention",
    }
    assert "linear_attention" in _compat.cache_layer_types(AutoConfig.for_model("qwen3_next"))
    assert _compat.cache_layer_types(object()) is None


def test_the_cache_argument_is_the_one_the_forward_takes_without_a_deprecation(
    tiny_model_path,
):
    """transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` and warns
    (FutureWarning) that the old name goes in 5.40; a class without ``cache`` keeps the old."""
    import warnings

    model = _base(tiny_model_path).eval()
    name = _compat.cache_argument(model)
    assert name in inspect.signature(type(model).forward).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecated name would raise here
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True)
            cache = out[name]
            model(input_ids=torch.tensor([[8]]), use_cache=True, **{name: cache})
    assert cache.get_seq_length() == 4

    class Custom(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None):
            return input_ids

    assert _compat.cache_argument(Custom()) == "past_key_values"
    assert _compat.cache_argument(object()) == "past_key_values"


def test_a_filled_cache_is_used_by_the_model_and_update_never_writes_in_place(tiny_model_path):
    model = _base(tiny_model_path).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.inference_mode():
        empty = _compat.kv_cache()
        cache = _compat.cache_argument(model)
        full = model(input_ids=ids, use_cache=True, **{cache: empty}).logits[:, -1]
        layers = [_compat.layer_kv(layer) for layer in _compat.kv_layers(empty)]
        assert all(kv is not None and kv[0].shape[2] == 6 for kv in layers)
        # the first five tokens' keys and values, in a cache the engine built
        prefix = _compat.kv_cache([(k[:, :, :5], v[:, :, :5]) for k, v in layers])
        kept = [_compat.layer_kv(layer)[0] for layer in _compat.kv_layers(prefix)]
        last = model(
            input_ids=ids[:, 5:],
            position_ids=torch.tensor([[5]]),
            attention_mask=torch.ones(1, 6, dtype=torch.long),
            use_cache=True,
            **{cache: prefix},
        ).logits[:, -1]
    torch.testing.assert_close(last, full)
    after = [_compat.layer_kv(layer)[0] for layer in _compat.kv_layers(prefix)]
    # update handed out new views and left the old columns as they were (what rolling
    # back a failed step relies on)
    pairs = zip(after, kept, strict=True)
    assert all(a.shape[2] == 6 and b.shape[2] == 5 and a is not b for a, b in pairs)
    layer = _compat.kv_layers(prefix)[0]
    _compat.set_layer_kv(layer, None, None)
    assert _compat.layer_kv(layer) is None


def test_a_registered_attention_gets_every_layer_and_the_forward_keywords(tiny_model_path):
    """What the packed step relies on: each layer updates the cache, then calls the named
    attention with the forward's keywords; no mask is built for the name; the model's
    own implementation is back after the forward, also after one that raised."""
    model = _base(tiny_model_path).eval()
    seen: list[tuple[int, object, object]] = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append((module.layer_idx, attention_mask, kwargs.get("mp13_canary")))
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, enable_gqa=key.shape[1] != query.shape[1]
        )
        return out.transpose(1, 2), None

    _compat.register_attention("mp13_canary", spy)
    own = model.config._attn_implementation
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
        with _compat.attention_implementation(model, "mp13_canary"):
            got = model(input_ids=ids, mp13_canary="passed down").logits
        with pytest.raises(RuntimeError), _compat.attention_implementation(model, "mp13_canary"):
            raise RuntimeError("a failed forward")
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    layers = model.config.num_hidden_layers
    assert seen == [(i, None, "passed down") for i in range(layers)]
    assert model.config._attn_implementation == own


def test_a_cache_joined_from_pieces_holds_them_in_order_and_appends_in_place():
    """A prefix-cache hit's blocks are copied once, into buffers with room for the rest."""
    gen = torch.Generator().manual_seed(0)
    pieces = [torch.randn(2, 2, n, 4, generator=gen) for n in (6, 3)]  # keys, values stacked
    cache = _compat.kv_cache_joined([pieces, pieces], coming=5)
    joined = torch.cat(pieces, dim=2).unsqueeze(1)  # (2, 1 row, heads, 9, dim)
    with torch.inference_mode():
        for index, layer in enumerate(_compat.kv_layers(cache)):
            keys, values = _compat.layer_kv(layer)
            torch.testing.assert_close(keys, joined[0])
            torch.testing.assert_close(values, joined[1])
            memory = keys.untyped_storage().data_ptr()
            new = torch.ones(1, 2, 5, 4)
            keys, values = cache.update(new, -new, index)
            assert keys.untyped_storage().data_ptr() == memory  # appended in place
            torch.testing.assert_close(keys, torch.cat([joined[0], new], dim=2))
            torch.testing.assert_close(values, torch.cat([joined[1], -new], dim=2))
    assert [p.shape[2] for p in pieces] == [6, 3]  # the pieces themselves are untouched


def test_a_cache_layer_appends_in_place_and_never_into_columns_it_handed_out():
    cache = _compat.kv_cache()
    layer_of = lambda: _compat.kv_layers(cache)[0]  # noqa: E731
    reference = torch.randn(2, 3, 4, 8)
    with torch.inference_mode():
        cache.update(reference, reference + 1, 0)
        memory = layer_of().keys.untyped_storage().data_ptr()
        for step in range(40):  # decode steps: one column each, in the same buffers
            col = torch.full((2, 3, 1, 8), float(step))
            keys, values = cache.update(col, col + 1, 0)
            reference = torch.cat([reference, col], dim=2)
        assert keys.untyped_storage().data_ptr() == memory
        torch.testing.assert_close(keys, reference)
        torch.testing.assert_close(values, reference + 1)

        # a rollback (a cut view) then an append: views handed out before stay as they were
        before = keys.clone()
        layer = layer_of()
        _compat.set_layer_kv(layer, keys[:, :, :-3], values[:, :, :-3])
        new, _ = cache.update(torch.full((2, 3, 1, 8), -1.0), torch.zeros(2, 3, 1, 8), 0)
        assert new.shape[2] == reference.shape[2] - 2
        torch.testing.assert_close(new[:, :, :-1], reference[:, :, :-3])
        torch.testing.assert_close(keys[:, :, :-3], before[:, :, :-3])

        # rows selected into a new tensor: the layer grows a buffer of its own again
        picked = new.index_select(0, torch.tensor([1]))
        _compat.set_layer_kv(layer, picked, picked.clone())
        grown, _ = cache.update(torch.ones(1, 3, 2, 8), torch.ones(1, 3, 2, 8), 0)
        torch.testing.assert_close(grown, torch.cat([picked, torch.ones(1, 3, 2, 8)], dim=2))
        assert grown.untyped_storage().data_ptr() != picked.untyped_storage().data_ptr()

        # a cache built from another cache's views never writes into that cache's memory
        source = new.clone()
        other = _compat.kv_cache([(new, new)])
        other.update(torch.full((2, 3, 1, 8), 9.0), torch.full((2, 3, 1, 8), 9.0), 0)
        torch.testing.assert_close(new, source)


def test_tensor_version_counts_in_place_writes():
    weight = torch.zeros(3)
    before = _compat.tensor_version(weight)
    weight.add_(1)  # what an optimizer step does to a LoRA weight
    assert _compat.tensor_version(weight) > before
    out_of_place = weight + 1
    assert _compat.tensor_version(weight) == before + 1 and out_of_place is not weight


# ----- bitsandbytes


@pytest.fixture
def model_4bit(tiny_model_path):
    pytest.importorskip("bitsandbytes")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_path, quantization_config=config, device_map="cpu"
    )
    return model.eval()


def _forward(model) -> None:
    with torch.no_grad():
        model(input_ids=torch.tensor([[5, 6, 7, 8]]))


def test_the_4bit_repack_flag_is_where_the_switch_expects_it(model_4bit):
    layers = [m for m in model_4bit.modules() if _compat._is_4bit(m)]
    assert layers, "bitsandbytes changed: no Params4bit weights with a quant_state"
    assert all(hasattr(m, _compat.REPACK_FLAG) for m in layers), (
        f"bitsandbytes changed: Linear4bit has no {_compat.REPACK_FLAG} flag to turn off"
    )
    for m in layers:
        setattr(m, _compat.REPACK_FLAG, True)
    assert _compat.keep_4bit_layout(model_4bit) == len(layers)
    assert _compat.keep_4bit_layout(model_4bit) == 0  # idempotent
    _forward(model_4bit)
    assert _compat.repacked_4bit_layers(model_4bit) == []


def test_a_repacking_forward_is_detected(model_4bit):
    from bitsandbytes.functional import has_avx512bf16

    if not has_avx512bf16():
        pytest.skip("bitsandbytes repacks only on CPUs with AVX512-BF16")
    for m in model_4bit.modules():
        if _compat._is_4bit(m):
            setattr(m, _compat.REPACK_FLAG, True)
    _forward(model_4bit)
    repacked = _compat.repacked_4bit_layers(model_4bit)
    assert repacked, "bitsandbytes changed: the repack no longer marks packing_format_for_cpu"


def test_the_int8_cast_notice_comes_from_the_logger_the_filter_is_on():
    functions = pytest.importorskip("bitsandbytes.autograd._functions")
    assert functions.logger.name == _compat.BNB_LOGGER, "bitsandbytes moved its cast notice"
    assert _compat.CAST_NOTICE in inspect.getsource(functions), "bitsandbytes reworded it"
    record = logging.LogRecord(_compat.BNB_LOGGER, logging.WARNING, "", 0, "", (), None)
    record.msg = _compat.CAST_NOTICE + " from torch.float32 to float16 during quantization"
    assert not _compat.DropCastNotice().filter(record)
    record.msg = "MatMul8bitLt: something else"
    assert _compat.DropCastNotice().filter(record)


def test_the_kernels_notice_comes_from_the_logger_the_filter_is_on():
    ops = pytest.importorskip("bitsandbytes.backends.cpu.ops")
    assert ops.logger.name == _compat.BNB_CPU_LOGGER, "bitsandbytes moved its kernels notice"
    assert _compat.KERNELS_NOTICE in inspect.getsource(ops), "bitsandbytes reworded it"
    record = logging.LogRecord(_compat.BNB_CPU_LOGGER, logging.WARNING, "", 0, "", (), None)
    record.msg = _compat.KERNELS_NOTICE + ": %s. Please make sure you already `pip install kernels`"
    assert not _compat.DropKernelsNotice().filter(record)
    record.msg = "bitsandbytes: something else"
    assert _compat.DropKernelsNotice().filter(record)


# ----- transformers: progress bars


def test_no_progress_bars_silences_this_thread_only_and_puts_the_hook_back():
    """Inside the block this thread's bars are opened with ``disable=True``; another
    thread's are not, a hook set before the block sees every bar, and it is back after."""
    import threading

    from transformers.utils import logging as hf_logging

    seen: list[tuple[str, object]] = []

    def spy(factory, args, kwargs):
        seen.append((kwargs["desc"], kwargs.get("disable")))
        return factory(*args, **kwargs)

    def bar(desc: str) -> None:
        list(hf_logging.tqdm(range(2), desc=desc))

    previous = hf_logging.set_tqdm_hook(spy)
    try:
        with _compat.no_progress_bars():
            bar("mine")
            other = threading.Thread(target=bar, args=("other thread",))
            other.start()
            other.join()
            with _compat.no_progress_bars():  # nested, as the demo build does
                bar("nested")
        bar("after")
        assert hf_logging.set_tqdm_hook(previous) is spy, "our hook was left installed"
    finally:
        hf_logging.set_tqdm_hook(previous)
    assert seen == [("mine", True), ("other thread", None), ("nested", True), ("after", None)]


def test_activation_checkpointing_is_switched_by_its_current_name(tiny_model_path):
    import warnings

    model = _base(tiny_model_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers 5.24 deprecates the gradient_* names
        _compat.set_activation_checkpointing(model, True)
        assert model.is_activation_checkpointing
        _compat.set_activation_checkpointing(model, False)
        assert not model.is_activation_checkpointing


def test_a_model_without_the_new_names_gets_the_old_ones():
    calls = []

    class Older:  # a transformers release before activation_checkpointing_*
        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            calls.append(("on", gradient_checkpointing_kwargs))

        def gradient_checkpointing_disable(self):
            calls.append(("off", None))

    _compat.set_activation_checkpointing(Older(), True)
    _compat.set_activation_checkpointing(Older(), False)
    assert calls == [("on", {"use_reentrant": False}), ("off", None)]


def test_peft_reading_a_deprecated_property_does_not_warn(tiny_model_path):
    import warnings

    model = _base(tiny_model_path)
    with warnings.catch_warnings():  # the filter list is put back afterwards
        # as in a user's process: no entry for it yet (pytest's settings hold one)
        warnings.filters[:] = [
            f for f in warnings.filters if not _compat._is_peft_deprecation_filter(f)
        ]
        warnings.simplefilter("error")
        with pytest.raises(FutureWarning, match="is_gradient_checkpointing"):
            _ = model.is_gradient_checkpointing  # what PEFT 0.21.2 does on every wrap
        _compat.install_peft_deprecation_filter()
        _compat.install_peft_deprecation_filter()  # idempotent: one entry
        assert sum(map(_compat._is_peft_deprecation_filter, warnings.filters)) == 1
        _wrapped(tiny_model_path, x=_lora())  # PEFT wraps it: nothing is raised
        with pytest.raises(DeprecationWarning):  # other warnings still are
            warnings.warn("other", DeprecationWarning, stacklevel=1)
