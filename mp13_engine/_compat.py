# SPDX-License-Identifier: Apache-2.0
"""Every reliance on PEFT, bitsandbytes and torch internals, in one place.

Concept
    The engine uses PEFT, bitsandbytes and torch through their documented API
    everywhere else. Where it cannot (a library bug to work around, or state no
    public API exposes), the code is here, one small function per need, each
    saying what it relies on and why. Upgrading one of these libraries means
    reading this module and running its canaries: ``tests/engine/test_compat.py``
    (one test per workaround, failing loudly when the library changed under it)
    and ``tests/engine/test_fused_lora.py`` (the fused path against PEFT's own).

Tested with
    peft 0.21.2, bitsandbytes 0.50.2, torch 2.13.0 (CPU), transformers 5.24.0;
    ``pyproject.toml`` caps peft and bitsandbytes at the next minor release.

What each workaround relies on (check these on upgrade)
    PEFT
    * ``peft_base_model``: the LoRA wrapper keeps the wrapped model at
      ``PeftModel.base_model.model``; ``get_base_model()`` is not used because
      it looks up the active adapter's config, which fails while that name is stale.
    * ``repoint_active_adapter``: after ``delete_adapter``, PEFT re-points
      ``PeftModel.active_adapter`` only when exactly one layer-level adapter is
      still active; otherwise it keeps the deleted name and every later config
      lookup (``generate``, ``get_base_model``) raises ``KeyError``.
    * ``drop_leaked_forward_hooks``: ``LoraModel._enable_peft_forward_hooks``
      (the context a forward with ``adapter_names`` runs in) registers
      ``_adapter_names_pre_forward_hook`` / ``_alora_offsets_pre_forward_hook``
      partials on every LoRA layer and removes them after its ``yield`` without
      ``try``/``finally``: a forward that raises leaves them installed, and every
      later forward without ``adapter_names`` (a training step) gets the stale
      list, fails ("Length of `adapter_names` should be the same as the number
      of inputs") or, with a batch of the same size, runs stale adapters.
    * ``undo_failed_wrap``: wrapping a plain model (``PeftModel.from_pretrained``)
      injects LoRA layers *in place* and stores ``peft_config`` in the model's
      ``__dict__`` before it loads weights; a failed load leaves both behind.
    * ``lend_originals_to_other_adapters``: ``ModulesToSaveWrapper._mixed_batch_forward``
      calls ``modules_to_save[name]`` for every row's adapter but ``__base__``, with no
      fallback for an adapter that has no copy there (``KeyError``); it keeps copies in
      the ``ModuleDict`` ``modules_to_save`` and the wrapped module at ``original_module``.
      ``TrainableTokensWrapper`` (``trainable_token_indices``) has the same gap: its
      ``_mixed_batch_forward`` calls ``_forward_wrapped_mixed_batch`` for every row's
      adapter but ``__base__``, which indexes ``token_adapter.trainable_tokens_delta`` and
      ``token_indices`` by that name (``KeyError``); it is overridden per instance to give
      such rows ``original_module``, exactly what ``__base__`` rows get. Its
      ``adapter_state_dict_load_map`` and ``adapter_state_dict`` also name the token
      deltas of *every* adapter asked about, where ``ModulesToSaveWrapper``'s check
      ``adapter_name not in self._adapters`` first: once it exists, loading
      (``set_peft_model_state_dict``) or saving (``get_peft_model_state_dict``) any
      adapter without tokens raises ``KeyError``; both are overridden per instance with
      that check. Canaries: ``test_compat.py``.
    * ``token_layer_clashes``: PEFT wraps the layers an adapter's
      ``trainable_token_indices`` name (the input embeddings for a list; module-name
      suffixes for a dict) *after* injecting its LoRA layers, and
      ``TrainableTokensWrapper.check_module`` raises ``TypeError`` on a layer another
      adapter's LoRA already wraps, leaving those LoRA layers behind; the other way round,
      LoRA refuses to wrap a ``TrainableTokensWrapper`` (``ValueError``). Matching uses
      PEFT's ``check_target_module_exists``.
    * The fused LoRA path (``peft_tuner_modules``, ``lora_weights``,
      ``lora_scaling``, ``holds_adapter``, ``is_plain_linear_lora``) reads LoRA
      layers' ``lora_A``/``lora_B`` (``ModuleDict`` of ``nn.Linear``),
      ``scaling``, ``lora_variant`` (DoRA, aLoRA, ...), ``merged_adapters`` and
      ``adapter_layer_names``, and imports ``LoraLayer``, ``BaseTunerLayer`` and
      ``AuxiliaryTrainingWrapper`` (``peft.utils.other``, an internal path).
    bitsandbytes
    * ``keep_4bit_layout`` / ``repacked_4bit_layers``: on a CPU with
      AVX512-BF16, ``Linear4bit.forward`` repacks its weight into a CPU layout
      on the first inference forward (per-layer flag
      ``support_avx512bf16_for_cpu``, marked ``quant_state.packing_format_for_cpu``).
      PEFT wrapping such a layer later reads its state dict, which converts it
      back best-effort; the next forward repacks that again and every output is
      garbage, the base model's too (issue 12, fix 6). The engine turns the flag
      off at load; the adapter manager refuses to wrap a layer repacked anyway.
    * ``install_int8_cast_filter``: bitsandbytes logs "MatMul8bitLt: inputs will
      be cast ..." on every forward of an 8-bit layer whose input is not float16
      (the normal case on CPU or with bf16), through the logger of its internal
      module ``bitsandbytes.autograd._functions`` (older versions: ``warnings``).
    * ``install_kernels_notice_filter``: on a CPU with AVX512-BF16, importing
      bitsandbytes (PEFT does, on the first adapter or training job, whatever
      the model) logs "Failed to load CPU gemm_4bit_forward from
      kernels-community ... pip install kernels" through the logger of
      ``bitsandbytes.backends.cpu.ops``. That kernel only computes the repacked
      4-bit layout, which mp13 turns off (``keep_4bit_layout``), so the advice
      cannot help and only alarms a user who loaded no 4-bit model at all.
    * ``install_peft_deprecation_filter``: PEFT 0.21.2's ``PeftModel.__init__``
      reads ``is_gradient_checkpointing``, which transformers 5.24 deprecates with
      a ``FutureWarning`` raised in ``transformers.modeling_utils``: it is PEFT's to
      fix, and reached a user on their first adapter or training job. The filter
      matches that message, category and module only.
    transformers (the KV cache the step loop batches, ``mp13_engine._kv``)
    * ``cache_layer_types``: ``cache_utils.get_layer_types_and_kwargs``, the
      per-layer cache kinds ``DynamicCache(config=...)`` would build
      ("full_attention", "sliding_attention", "linear_attention", ...).
    * ``kv_cache``, ``kv_layers``, ``layer_kv``, ``set_layer_kv``: a
      ``DynamicCache`` whose ``layers`` list the engine fills with its own
      ``DynamicLayer`` subclass (below), and each layer's ``keys`` / ``values``
      tensors (``(rows, heads, columns, dim)``) and ``is_initialized`` flag,
      read and replaced directly (rows join, leave and are rolled back; no
      public API does that); ``Cache.layer_class_to_replicate`` makes an empty
      ``DynamicCache()`` append that class as the first forward reaches each layer.
    * The growing layer: ``DynamicLayer.update(keys, values, *args, **kwargs)``
      returns the layer's whole keys and values after appending; the plain
      layer concatenates into new tensors at every call, a large part of a
      batched decode step on CPU (fresh multi-MB buffers, page faults). The
      subclass appends into spare columns of buffers it owns and returns
      views. It appends in place only while the layer still holds the views it
      handed out last; keys the engine replaced (rows selected, joined, cut or
      rolled back) are copied into new buffers first, so a view taken earlier
      never changes.
    * ``forward_arguments`` / ``cache_argument``: the causal LMs' ``forward`` takes the KV cache as
      ``cache`` in transformers 5.24 (``past_key_values`` is deprecated there,
      with a FutureWarning and removal announced for 5.40, and outputs hold it
      under ``cache``); earlier 5.x releases and custom models take only
      ``past_key_values``. Read from the forward's signature (the deprecation
      decorator keeps it through ``functools.wraps``).
    * ``register_attention`` / ``attention_implementation``: a function
      registered with ``AttentionInterface.register`` (transformers' documented
      way to add an attention implementation) runs wherever the model's
      attention modules look up ``config._attn_implementation``; the packed
      step (``_packed``) sets that name for one forward and restores it. It
      relies on every layer calling ``cache.update(...)`` and then the
      interface function with the forward's keyword arguments (checked after
      every packed forward), and on mask creation being skipped for a name
      without a registered mask function (``masking_utils``).
    * ``no_progress_bars``: ``transformers.utils.logging.set_tqdm_hook`` (public
      since 5.x) is called with the factory, arguments and keywords of every
      progress bar transformers opens ("Writing model shards" in
      ``save_pretrained``, "Loading weights" in ``from_pretrained``), which the
      factory (tqdm, or transformers' no-op stand-in) accepts ``disable=True`` for.
      The hook is one process-wide slot: ours is in it only inside the block, and
      only the thread that entered the block loses its bars.
    * ``set_activation_checkpointing``: ``activation_checkpointing_enable`` /
      ``_disable`` (5.24), which ``gradient_checkpointing_enable`` / ``_disable`` are
      deprecated aliases of (FutureWarning, removed in v6); a model without the new
      names gets the old ones.
    torch
    * ``tensor_version``: ``Tensor._version``, torch's in-place modification
      counter, tells the fused path that a cached copy of a weight is stale
      (an optimizer step bumps it).

Invariants
    * Importing this module imports neither torch, peft nor bitsandbytes; each
      function imports what it needs when called.
    * Only the objects passed in change (model attributes, one logger's filters,
      two ``warnings`` entries, each of two loggers' filters, transformers' tqdm
      hook for the length of a ``no_progress_bars`` block); nothing else
      process-wide, and no monkey patches.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, MutableSet, Sequence
from typing import Any

import attrs

# ----- PEFT: the wrapper


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a ``PeftModel``, without importing peft (seconds) when it is unused.

    A PeftModel cannot exist unless peft was imported, so a missing module means no.
    """
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def peft_base_model(model: Any) -> Any:
    """The transformers model inside a LoRA ``PeftModel`` (``model`` itself when not wrapped)."""
    return model.base_model.model if is_peft_model(model) else model


def repoint_active_adapter(model: Any) -> None:
    """After ``delete_adapter``: point PEFT's ``active_adapter`` at an adapter that exists.

    Requests pass ``adapter_names`` per row, so which remaining adapter is
    "active" changes no output; it only has to exist. Call with adapters left.
    """
    if model.active_adapter not in model.peft_config:
        model.active_adapter = next(iter(model.peft_config))


def drop_leaked_forward_hooks(model: Any) -> int:
    """Remove the per-forward hooks a failed PEFT forward left on LoRA layers; how many.

    Call between forwards only (no forward of ``model`` running). A no-op on a model
    PEFT never wrapped.
    """
    if not is_peft_model(model):
        return 0
    from peft.tuners.lora import model as lora_model

    leaked = {
        getattr(lora_model, name, None)
        for name in ("_adapter_names_pre_forward_hook", "_alora_offsets_pre_forward_hook")
    } - {None}
    dropped = 0
    for module in model.modules():
        hooks = module._forward_pre_hooks
        if not hooks:
            continue
        for key, hook in list(hooks.items()):
            if getattr(hook, "func", None) in leaked:  # a functools.partial of one of them
                del hooks[key]
                module._forward_pre_hooks_with_kwargs.pop(key, None)
                dropped += 1
    return dropped


def undo_failed_wrap(model: Any, requires_grad: Sequence[bool]) -> None:
    """Give a plain model back its state from before a PEFT wrap that failed midway.

    ``requires_grad``: each parameter's flag from before the wrap, in
    ``model.parameters()`` order (PEFT freezes the base parameters).
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    for path, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer):
            parent, _, child = path.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    model.__dict__.pop("peft_config", None)
    for param, grad in zip(model.parameters(), requires_grad, strict=False):
        param.requires_grad_(grad)


def lend_originals_to_other_adapters(model: Any, hooked: MutableSet[Any]) -> None:
    """Let rows on adapters without their own copy of a wrapped module use the original.

    PEFT's ``ModulesToSaveWrapper`` serves per-row ``adapter_names`` by looking each
    row's adapter up in its ``modules_to_save`` dict; an adapter that has no copy there
    (any plain LoRA adapter beside one that saved ``lm_head``) raises ``KeyError``, so
    loading such an adapter failed every request on every other adapter. For each
    wrapper of ``model`` not yet in ``hooked``, a forward pre-hook lends the wrapper's
    original module to every adapter of ``model`` without a copy (the same module object,
    no weights copied) and a forward hook that runs however the forward ends takes the
    loans back, so saves, state dicts and the fused path's checks never see them.

    PEFT's ``TrainableTokensWrapper`` (an adapter saved with ``trainable_token_indices``)
    looks each row's adapter up among its token deltas the same way, and so do its
    state-dict maps, so no adapter without tokens could be loaded or saved after one with.
    Those three methods are replaced on the instance (nothing is registered or stored in
    its dicts): for an adapter with tokens there they run PEFT's own; a row on any other
    adapter gets the wrapped layer, as a ``__base__`` row does, and its state dict nothing
    from this wrapper, as from a ``ModulesToSaveWrapper`` without its copy.
    """
    from peft.utils.other import ModulesToSaveWrapper, TrainableTokensWrapper

    owner = weakref.ref(model)
    for module in model.modules():
        if module in hooked:
            continue
        if isinstance(module, ModulesToSaveWrapper):
            module.register_forward_pre_hook(functools.partial(_lend_original, owner))
            module.register_forward_hook(_take_back_original, always_call=True)
            hooked.add(module)
        elif isinstance(module, TrainableTokensWrapper):
            # A weak reference: the wrapper's own __dict__ holds this partial.
            wrapper = weakref.ref(module)
            module._forward_wrapped_mixed_batch = functools.partial(  # type: ignore[method-assign]
                _tokens_or_original, wrapper
            )
            module.adapter_state_dict_load_map = functools.partial(  # type: ignore[method-assign]
                _tokens_state_or_none, wrapper, "adapter_state_dict_load_map"
            )
            module.adapter_state_dict = functools.partial(  # type: ignore[method-assign]
                _tokens_state_or_none, wrapper, "adapter_state_dict"
            )
            hooked.add(module)


def _lend_original(owner: weakref.ref[Any], wrapper: Any, args: Any) -> None:
    model = owner()
    if model is None:
        return
    copies = wrapper.modules_to_save
    for name in model.peft_config:
        if name not in copies:
            copies[name] = wrapper.original_module


def _take_back_original(wrapper: Any, args: Any, output: Any) -> None:
    copies = wrapper.modules_to_save
    for name in [n for n, m in copies.items() if m is wrapper.original_module]:
        del copies[name]


def _tokens_or_original(
    wrapper_ref: weakref.ref[Any], x: Any, adapter: str, *args: Any, **kwargs: Any
) -> Any:
    wrapper = wrapper_ref()
    assert wrapper is not None, "called through the wrapper, which is therefore alive"
    if adapter in wrapper.token_adapter.trainable_tokens_delta:  # a tied head shares this dict
        return type(wrapper)._forward_wrapped_mixed_batch(wrapper, x, adapter, *args, **kwargs)
    return wrapper.original_module(x, *args, **kwargs)


def _tokens_state_or_none(
    wrapper_ref: weakref.ref[Any], method: str, adapter: str, *args: Any
) -> dict[str, Any]:
    wrapper = wrapper_ref()
    assert wrapper is not None, "called through the wrapper, which is therefore alive"
    if adapter not in wrapper._adapters:  # the check ModulesToSaveWrapper's own maps make
        return {}
    return dict(getattr(type(wrapper), method)(wrapper, adapter, *args))


def token_layer_clashes(model: Any, config: Any) -> dict[str, frozenset[str]]:
    """Layers of ``model`` that adapter config ``config`` and the loaded adapters both
    claim, one with trainable tokens and the other with LoRA, which PEFT cannot stack
    (layer name -> the loaded adapters claiming it; none where only the wrapper an unloaded
    adapter left is there: PEFT unwraps layers only when the model is); empty for a plain
    model."""
    from peft.tuners.tuners_utils import BaseTunerLayer, check_target_module_exists
    from peft.utils.other import TrainableTokensWrapper

    if not is_peft_model(model):
        return {}
    inner = peft_base_model(model)
    tokens = getattr(config, "trainable_token_indices", None) or {}
    if isinstance(tokens, dict):
        token_targets = list(tokens)
    else:  # a list: PEFT's default layer, the input embeddings
        embeddings = inner.get_input_embeddings()
        token_targets = [next(n for n, m in inner.named_modules() if m is embeddings)]
    clashes = {}
    for key, module in inner.named_modules():
        if isinstance(module, TrainableTokensWrapper):
            mine = bool(check_target_module_exists(config, key))
            theirs = list(module.token_adapter.trainable_tokens_delta)
        elif isinstance(module, BaseTunerLayer):
            mine = any(key.endswith(target) for target in token_targets)
            theirs = [n for n in model.peft_config if holds_adapter(module, n)]
        else:
            continue
        if mine:
            clashes[key] = frozenset(theirs)
    return clashes


# ----- PEFT: LoRA layers, read by the fused mixed-adapter path (mp13_engine._fused_lora)


@attrs.frozen
class TunerModules:
    """The PEFT modules of one model: its LoRA layers and every other module holding adapters."""

    lora: tuple[Any, ...]
    others: tuple[Any, ...]  # modules_to_save, trainable tokens, non-LoRA tuner layers


def peft_adapter_names(model: Any) -> frozenset[str]:
    """The PEFT adapter names ``model`` holds (none for a plain model)."""
    return frozenset(model.peft_config) if is_peft_model(model) else frozenset()


def peft_tuner_modules(model: Any) -> TunerModules:
    """``model``'s LoRA layers, and the other modules that keep adapter weights."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    lora, others = [], []
    for module in model.modules():
        if isinstance(module, LoraLayer):
            lora.append(module)
        elif isinstance(module, (BaseTunerLayer, AuxiliaryTrainingWrapper)):
            others.append(module)
    return TunerModules(tuple(lora), tuple(others))


def lora_names(layer: Any) -> frozenset[str]:
    """The adapters that have linear LoRA factors (``lora_A``) in ``layer``."""
    return frozenset(layer.lora_A)


def lora_weights(layer: Any, name: str) -> tuple[Any, Any]:
    """Adapter ``name``'s ``A`` (rank x in) and ``B`` (out x rank) weight tensors in ``layer``."""
    return layer.lora_A[name].weight, layer.lora_B[name].weight


def lora_scaling(layer: Any, name: str) -> float:
    """The factor PEFT multiplies adapter ``name``'s ``B(A(x))`` by in ``layer``."""
    return float(layer.scaling[name])


def holds_adapter(module: Any, name: str, skip: tuple[str, ...] = ()) -> bool:
    """Whether ``module`` keeps weights of adapter ``name`` (outside the ``skip`` attributes)."""
    for path in module.adapter_layer_names:  # tuner layers and auxiliary wrappers alike
        if path in skip:
            continue
        holder: Any = module
        for part in path.split("."):
            holder = getattr(holder, part)
        if name in holder:
            return True
    return False


def is_plain_linear_lora(layer: Any, name: str) -> bool:
    """Whether adapter ``name`` is plain linear LoRA in ``layer``: only ``B(A(x)) * scaling``.

    Not plain: a LoRA variant (DoRA, aLoRA, ...), a bias on ``lora_B``, weights
    merged into the base layer, weights offloaded to the meta device, or more
    weights of the adapter in the layer (embedding LoRA, magnitude vectors).
    """
    import torch

    lora_a, lora_b = layer.lora_A[name], layer.lora_B[name]
    return (
        isinstance(lora_a, torch.nn.Linear)
        and isinstance(lora_b, torch.nn.Linear)
        and lora_b.bias is None
        and "meta" not in (lora_a.weight.device.type, lora_b.weight.device.type)
        and name not in layer.lora_variant
        and not layer.merged_adapters
        and not holds_adapter(layer, name, skip=("lora_A", "lora_B"))
    )


# ----- torch


def tensor_version(tensor: Any) -> int:
    """torch's in-place modification counter of ``tensor`` (bumped by every in-place write)."""
    return int(tensor._version)


# ----- transformers: the KV cache layers of the step loop (mp13_engine._kv)


def cache_layer_types(config: Any) -> list[str] | None:
    """The cache kind of each decoder layer of ``config`` (None: the config does not say)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    try:
        types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    except (AttributeError, TypeError, ValueError, KeyError):
        return None
    return list(types)


#: Spare columns a growing layer allocates beyond what it holds: at least this many, and
#: at least half as many again (so a decode step reallocates once every many steps).
_SPARE_COLUMNS = 64


def _columns_for(needed: int) -> int:
    """Columns a growing layer allocates when it must hold ``needed``: spare ones beyond."""
    return needed + max(_SPARE_COLUMNS, needed // 2)


@functools.cache
def _growing_layer() -> type:
    """``DynamicLayer`` appending into spare columns of buffers it owns (see above)."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        _buffers: tuple[Any, Any] | None = None  # keys and values, with spare columns
        _handed: tuple[Any, Any] | None = None  # the views ``update`` returned last
        _capacity = 0  # columns in the buffers

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            keys: Any = self.keys
            held = int(keys.shape[-2]) if keys.numel() else 0
            end = held + int(key_states.shape[-2])
            handed = self._handed
            # The held keys are still the views handed out (not replaced: rows selected,
            # joined, cut or rolled back), so they are the buffers' first ``held`` columns.
            if (
                handed is None
                or handed[0] is not keys
                or handed[1] is not self.values
                or end > self._capacity
            ):
                self._grow(key_states, value_states, held, end)
            assert self._buffers is not None
            kbuf, vbuf = self._buffers
            kbuf[:, :, held:end].copy_(key_states)
            vbuf[:, :, held:end].copy_(value_states)
            self.keys, self.values = kbuf[:, :, :end], vbuf[:, :, :end]
            self._handed = (self.keys, self.values)
            return self.keys, self.values

        def _grow(self, new_keys: Any, new_values: Any, held: int, needed: int) -> None:
            """New buffers for ``needed`` columns and spare ones, holding the held keys."""
            cap = _columns_for(needed)
            rows, heads = new_keys.shape[:2]
            kbuf = new_keys.new_empty((rows, heads, cap, new_keys.shape[-1]))
            vbuf = new_values.new_empty((rows, heads, cap, new_values.shape[-1]))
            if held:
                kbuf[:, :, :held].copy_(self.keys)
                vbuf[:, :, :held].copy_(self.values)
            self._buffers, self._capacity = (kbuf, vbuf), cap

        def hold(self, pieces: Sequence[Any], coming: int) -> None:
            """Hold one row's ``pieces`` (each ``(2, heads, n, dim)``: keys then values)
            joined along the columns, copied once into buffers with room for ``coming``
            more columns, so those are appended in place."""
            first = pieces[0]
            held = sum(int(p.shape[-2]) for p in pieces)
            cap = _columns_for(held + coming)
            both = first.new_empty((2, 1, first.shape[1], cap, first.shape[-1]))
            torch.cat(list(pieces), dim=2, out=both[:, 0, :, :held])
            kbuf, vbuf = both[0], both[1]
            self._buffers, self._capacity = (kbuf, vbuf), cap
            self.lazy_initialization(kbuf, vbuf)
            self.keys, self.values = kbuf[:, :, :held], vbuf[:, :, :held]
            self._handed = (self.keys, self.values)

    return GrowingLayer


def kv_cache(layers: Sequence[tuple[Any, Any]] = ()) -> Any:
    """A ``DynamicCache`` of growing layers holding ``layers`` (per layer: keys, values).

    Empty, it grows one layer per model layer at the first forward.
    """
    cache = _empty_cache()
    if layers:
        made: list[Any] = []
        for keys, values in layers:
            layer = cache.layer_class_to_replicate()
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            made.append(layer)
        cache.layers = made
    return cache


def kv_cache_joined(layers: Sequence[Sequence[Any]], coming: int) -> Any:
    """A one-row ``DynamicCache`` whose layer ``i`` holds ``layers[i]``'s pieces (each
    ``(2, heads, n, dim)``: keys then values) joined along the columns, in one copy, with
    room for ``coming`` more columns."""
    cache = _empty_cache()
    made: list[Any] = []
    for pieces in layers:
        layer = cache.layer_class_to_replicate()
        layer.hold(pieces, coming)
        made.append(layer)
    cache.layers = made
    return cache


def _empty_cache() -> Any:
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layer_class_to_replicate = _growing_layer()
    return cache


def forward_arguments(kind: type) -> tuple[bool, str]:
    """What the causal LM class ``kind``'s forward takes: ``logits_to_keep`` (every recent
    one does), and the name of its KV cache argument, which its output holds the cache
    under too (``cache`` since transformers 5.2x, which deprecates ``past_key_values``;
    older and custom models take ``past_key_values``). A class that is not a transformers
    model (a wrapper) is asked for neither."""
    try:
        params = inspect.signature(kind.forward).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False, "past_key_values"
    return "logits_to_keep" in params, "cache" if "cache" in params else "past_key_values"


def cache_argument(model: Any) -> str:
    """The name ``model``'s forward takes its KV cache by (see ``forward_arguments``)."""
    return forward_arguments(type(model))[1]


def set_activation_checkpointing(model: Any, enabled: bool) -> None:
    """Turn activation (gradient) checkpointing of a transformers ``model`` on (non-
    reentrant, as PEFT's training needs) or off, by its current name where it has it."""
    if enabled:
        on = getattr(model, "activation_checkpointing_enable", None)
        if on is not None:
            on(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    else:
        off = getattr(model, "activation_checkpointing_disable", None)
        (off or model.gradient_checkpointing_disable)()


@functools.cache
def register_attention(name: str, function: Callable[..., Any]) -> None:
    """Make ``function`` an attention implementation of transformers under ``name``."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, function)


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """Run the enclosed forward of ``model`` (a transformers model) with attention ``name``."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


def kv_layers(cache: Any) -> list[Any]:
    """The cache's layer objects (``DynamicLayer``), in model order; the list itself."""
    return cache.layers  # type: ignore[no-any-return]


def layer_kv(layer: Any) -> tuple[Any, Any] | None:
    """A cache layer's keys and values, or None while it holds nothing yet."""
    if not layer.is_initialized or layer.keys is None or layer.values is None:
        return None
    return layer.keys, layer.values


def set_layer_kv(layer: Any, keys: Any, values: Any) -> None:
    """Replace a layer's keys and values (both None: the layer holds nothing again)."""
    layer.keys, layer.values = keys, values
    if keys is None:
        layer.is_initialized = False


# ----- bitsandbytes: 4-bit weight layout on CPU

REPACK_FLAG = "support_avx512bf16_for_cpu"


def _is_4bit(module: Any) -> bool:
    weight = getattr(module, "weight", None)  # not every module has weights
    return type(weight).__name__ == "Params4bit" and hasattr(weight, "quant_state")


def keep_4bit_layout(model: Any) -> int:
    """Stop bitsandbytes repacking the 4-bit weights of ``model``; return the layers changed.

    Without the repack bitsandbytes computes from the standard layout
    (correctness over the packed layout's possible CPU speed-up, which needs the
    optional ``kernels`` package anyway).
    """
    changed = 0
    for module in model.modules():
        # getattr: bitsandbytes before 0.48 has no such flag (and never repacks).
        if _is_4bit(module) and getattr(module, REPACK_FLAG, False):
            setattr(module, REPACK_FLAG, False)
            changed += 1
    return changed


def repacked_4bit_layers(model: Any) -> list[str]:
    """Names of 4-bit layers whose weight bitsandbytes has repacked into its CPU layout."""
    return [
        name
        for name, module in model.named_modules()
        if _is_4bit(module) and getattr(module.weight.quant_state, "packing_format_for_cpu", False)
    ]


# ----- bitsandbytes: the 8-bit cast notice

CAST_NOTICE = "MatMul8bitLt: inputs will be cast"
BNB_LOGGER = "bitsandbytes.autograd._functions"


class DropCastNotice(logging.Filter):
    """Drops bitsandbytes' 8-bit cast notice; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CAST_NOTICE)


def install_int8_cast_filter() -> None:
    """Drop the 8-bit cast notice from now on in this process (idempotent).

    Installed once when an 8-bit model loads, never swapped around model calls:
    ``catch_warnings`` around every step replaced the process-wide filter list
    from the worker thread and lost filters other threads added meanwhile
    (issue 11, item 18). Two threads racing here at worst add the same filter
    twice, which changes nothing.
    """
    logger = logging.getLogger(BNB_LOGGER)
    if not any(isinstance(f, DropCastNotice) for f in logger.filters):
        logger.addFilter(DropCastNotice())
    # warnings.filterwarnings would move an identical filter to the front; check first so the
    # order of the user's own filters is left alone.
    if not any(_is_cast_filter(f) for f in warnings.filters):
        warnings.filterwarnings("ignore", message=CAST_NOTICE)


# ----- transformers: progress bars a tiny-model build draws

# Serialises ``no_progress_bars`` blocks, so each puts back exactly the hook it found (two
# interleaved blocks would otherwise restore each other's hooks out of order). Reentrant:
# a block may open another in the same thread (the demo build saves a built model).
_BARS_HOOK_LOCK = threading.RLock()


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """Transformers draws no progress bar for this thread inside the block.

    For the tiny-model builders (``mp13_engine.testing``): "Writing model shards" and
    "Loading weights" for a model made in a second tell a user nothing. Other threads'
    bars, and every bar after the block, are drawn as before; a hook installed before
    the block still sees every bar (ours passes each on to it).
    """
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)
    if set_hook is None:  # a transformers before the hook: its bars are drawn, as they were
        yield
        return
    thread = threading.get_ident()

    def hook(factory: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if threading.get_ident() == thread:
            kwargs = {**kwargs, "disable": True}
        if previous is not None:
            return previous(factory, args, kwargs)
        return factory(*args, **kwargs)

    with _BARS_HOOK_LOCK:
        previous = set_hook(hook)
        try:
            yield
        finally:
            found = set_hook(previous)
            if found is not hook:  # set by someone else inside the block: theirs stays
                set_hook(found)


# ----- bitsandbytes: the "pip install kernels" notice at import

KERNELS_NOTICE = "Failed to load CPU gemm_4bit_forward from kernels-community"
BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"


class DropKernelsNotice(logging.Filter):
    """Drops bitsandbytes' advice to install ``kernels``; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(KERNELS_NOTICE)


def install_kernels_notice_filter() -> None:
    """Drop the ``kernels`` notice from now on in this process (idempotent).

    Installed when a model loads, before anything imports bitsandbytes (the
    notice is logged once, at import).
    """
    logger = logging.getLogger(BNB_CPU_LOGGER)
    if not any(isinstance(f, DropKernelsNotice) for f in logger.filters):
        logger.addFilter(DropKernelsNotice())


PEFT_DEPRECATION = "`is_gradient_checkpointing` is deprecated"


def install_peft_deprecation_filter() -> None:
    """Ignore transformers' deprecation of ``is_gradient_checkpointing``, which PEFT reads
    on every wrap, from now on in this process (idempotent). Matched on that one message,
    category and module; transformers raises it where the property is, so a user's own
    read of the property is quiet too (``is_activation_checkpointing`` is its new name)."""
    if not any(_is_peft_deprecation_filter(f) for f in warnings.filters):
        warnings.filterwarnings(
            "ignore",
            message=PEFT_DEPRECATION,
            category=FutureWarning,
            module="transformers.modeling_utils",
        )


def _is_peft_deprecation_filter(entry: tuple[Any, ...]) -> bool:
    action, message = entry[0], entry[1]
    return action == "ignore" and getattr(message, "pattern", None) == PEFT_DEPRECATION


def _is_cast_filter(entry: tuple[Any, ...]) -> bool:
    action, message = entry[0], entry[1]
    return action == "ignore" and getattr(message, "pattern", None) == CAST_NOTICE
