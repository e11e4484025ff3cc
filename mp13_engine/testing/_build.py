# SPDX-License-Identifier: Apache-2.0
"""Build tiny random-weight models offline: ``build_tiny_model`` and ``build_tiny_encoder``.

Concept: a model directory as ``from_pretrained`` expects it (config, safetensors weights,
generation config, tokenizer files, chat template), made in about a second from code alone.

Invariants:
- Offline and deterministic: the same (family, size, seed, init_std) writes byte-identical
  weight and tokenizer files. All randomness comes from a local ``torch.Generator``; the global
  torch RNG state is left exactly as it was.
- Trainable: linear and embedding weights are drawn with a large std (0.2 for ``tiny``), so
  the untied output layer can produce confident logits and a LoRA can memorise answers.
- The generation config's ``eos_token_id`` lists the family's end-of-turn token(s).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TypeVar

import attrs
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from mp13_engine._cache import cache_root, staging_dir
from mp13_engine._compat import no_progress_bars
from mp13_engine._errors import ConfigError
from mp13_engine.testing._corpus import CORPUS
from mp13_engine.testing._families import FAMILIES, FamilySpec
from mp13_engine.testing._tokenizer import build_bpe_tokenizer

# Bump when anything that changes the built files changes (corpus, init, templates...).
BUILD_VERSION = "2"

BASE_VOCAB = 1024  # byte alphabet + learned merges, before the family's added tokens


@attrs.frozen
class SizeSpec:
    """Shape of a tiny model."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    init_std: float
    max_position_embeddings: int = 2048


SIZES: MappingProxyType[str, SizeSpec] = MappingProxyType(
    {
        "tiny": SizeSpec(64, 2, 4, 2, 128, init_std=0.2),
        "small": SizeSpec(256, 4, 8, 4, 688, init_std=0.1),
    }
)


_T = TypeVar("_T")


def _pick(table: Mapping[str, _T], what: str, name: str, listed_in: str) -> _T:
    """``table[name]``, or a ConfigError naming the unknown tiny model ``what`` and the choices."""
    spec = table.get(name)
    if spec is None:
        raise ConfigError(
            f"unknown tiny model {what} {name!r}; use one of {sorted(table)} "
            f"(mp13_engine.testing.{listed_in})"
        )
    return spec


def build_tokenizer(
    family: str = "chatml", *, chat_template: bool = True
) -> PreTrainedTokenizerFast:
    """The family's tokenizer (byte-level BPE + its special tokens + optionally its template)."""
    spec = _pick(FAMILIES, "family", family, "TINY_FAMILIES")
    tok = build_bpe_tokenizer(
        CORPUS,
        BASE_VOCAB,
        special_tokens=spec.control_tokens,
        markup_tokens=spec.markup_tokens,
        bos_token=spec.bos_token if spec.add_bos else None,
        pipeline=spec.pipeline,
    )
    kwargs = {}
    if spec.bos_token is not None:
        kwargs["bos_token"] = spec.bos_token
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        chat_template=spec.chat_template() if chat_template else None,
        model_max_length=SIZES["tiny"].max_position_embeddings,
        clean_up_tokenization_spaces=False,
        **kwargs,
    )


def _init_weights(model: torch.nn.Module, seed: int, std: float) -> None:
    """Overwrite every parameter from a local generator: norms 1, biases 0, matrices N(0, std)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.ndim == 1 and "norm" in name:
                param.fill_(1.0)
            elif param.ndim == 1:
                param.zero_()
            else:
                values = torch.randn(param.shape, generator=gen, dtype=torch.float32) * std
                param.copy_(values.to(param.dtype))


def build_tiny_model(
    dest_dir: str | pathlib.Path,
    family: str = "chatml",
    seed: int = 0,
    size: str = "tiny",
    *,
    chat_template: bool = True,
    init_std: float | None = None,
) -> pathlib.Path:
    """Write a tiny random-weight causal LM of ``family`` into ``dest_dir`` and return its path.

    ``chat_template=False`` leaves the tokenizer without a chat template (for error tests).
    ``init_std`` overrides the size's weight init std. Unknown family or size -> ``ConfigError``.
    """
    spec = _pick(FAMILIES, "family", family, "TINY_FAMILIES")
    shape = _pick(SIZES, "size", size, "TINY_SIZES")
    return build_with_shape(
        dest_dir, spec, shape, seed, chat_template=chat_template, init_std=init_std
    )


def tiny_model_path(
    family: str = "chatml", seed: int = 0, cache_dir: str | pathlib.Path | None = None
) -> pathlib.Path:
    """``build_tiny_model(family=family, seed=seed)`` built once into a cache folder and reused.

    The folder is ``cache_dir``, else mp13's cache (``$MP13_CACHE``, else
    ``$XDG_CACHE_HOME/mp13``, else ``~/.cache/mp13``); the model lives in
    ``tiny-<family>-<seed>-<BUILD_VERSION>`` inside it.
    """
    root = pathlib.Path(cache_dir).expanduser() if cache_dir else cache_root()
    dest = root / f"tiny-{family}-{seed}-{BUILD_VERSION}"
    return built_once(dest, lambda tmp: build_tiny_model(tmp, family=family, seed=seed))


def built_once(dest: pathlib.Path, build: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """``dest``, made by ``build(folder)`` unless it already holds a model: built aside in the
    model cache's staging folder (``_cache.staging_dir``) and renamed into place, so a
    concurrent or interrupted build never leaves half a model."""
    if (dest / "model.safetensors").exists():
        return dest
    with staging_dir(dest.parent, dest.name) as tmp:
        build(tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process finished first; its model is as good as ours
            if not (dest / "model.safetensors").exists():
                raise
    return dest


def build_with_shape(
    dest_dir: str | pathlib.Path,
    spec: FamilySpec,
    shape: SizeSpec,
    seed: int = 0,
    *,
    chat_template: bool = True,
    init_std: float | None = None,
) -> pathlib.Path:
    """``build_tiny_model`` with an explicit family spec and shape (the demo model's seam)."""
    std = shape.init_std if init_std is None else float(init_std)
    if not std > 0:
        raise ConfigError(f"init_std must be a positive float, got {init_std!r}")
    dest = pathlib.Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(spec.name, chat_template=chat_template)
    tok.model_max_length = shape.max_position_embeddings
    ids = {t: tok.convert_tokens_to_ids(t) for t in spec.control_tokens}
    config = AutoConfig.for_model(
        spec.model_type,
        vocab_size=len(tok),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        initializer_range=std,
        tie_word_embeddings=False,
        bos_token_id=ids.get(spec.bos_token) if spec.bos_token else None,
        eos_token_id=ids[spec.eos_token],
        pad_token_id=ids[spec.pad_token],
    )
    # Building the module draws from the global RNG (default init); fork it so callers'
    # RNG state is untouched, then overwrite every weight from our own generator.
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _init_weights(model, seed, std)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[ids[t] for t in spec.end_of_turn],
        pad_token_id=ids[spec.pad_token],
    )
    save(model, tok, dest)
    return dest


def save(model: PreTrainedModel, tok: PreTrainedTokenizerFast, dest: pathlib.Path) -> None:
    """Write ``model`` and ``tok`` into ``dest`` without transformers' "Writing model shards"
    bar: the model is made in a second and the bar only hides what the caller prints."""
    with no_progress_bars():
        model.save_pretrained(dest)
        tok.save_pretrained(dest)


def build_tiny_encoder(dest_dir: str | pathlib.Path, seed: int = 0) -> pathlib.Path:
    """Write a tiny DistilBERT masked-LM (not a causal LM) into ``dest_dir``; for error tests."""
    dest = pathlib.Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer("chatml", chat_template=False)
    config = DistilBertConfig(
        vocab_size=len(tok),
        dim=64,
        hidden_dim=128,
        n_layers=2,
        n_heads=4,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        model = DistilBertForMaskedLM(config)
    _init_weights(model, seed, 0.02)
    save(model, tok, dest)
    return dest
