# SPDX-License-Identifier: Apache-2.0
"""Tests of ``mp13_engine.testing``: offline tiny models are deterministic, loadable, usable."""

from __future__ import annotations

import hashlib
import pathlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mp13_engine import ConfigError
from mp13_engine.testing import TINY_FAMILIES, build_tiny_model


def _digests(path: pathlib.Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def test_same_seed_gives_byte_identical_files(tmp_path: pathlib.Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    assert _digests(a) == _digests(b)
    assert _digests(a)["model.safetensors"] != _digests(c)["model.safetensors"]
    assert _digests(a)["tokenizer.json"] == _digests(c)["tokenizer.json"]


def test_build_leaves_global_rng_untouched(tmp_path: pathlib.Path) -> None:
    before = torch.random.get_rng_state()
    build_tiny_model(tmp_path / "m")
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.parametrize(
    ("kwargs", "word"), [({"family": "nope"}, "family"), ({"size": "xl"}, "size")]
)
def test_unknown_family_or_size_is_a_config_error(
    tmp_path: pathlib.Path, kwargs: dict[str, str], word: str
) -> None:
    with pytest.raises(ConfigError, match=word) as info:
        build_tiny_model(tmp_path, **kwargs)
    assert "chatml" in str(info.value) or "tiny" in str(info.value)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_family_loads_offline_and_generates(tiny_model_factory, family: str) -> None:
    path = tiny_model_factory(family)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 5)
    assert model.config.vocab_size == len(tok)
