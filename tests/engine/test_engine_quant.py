# SPDX-License-Identifier: Apache-2.0
"""bitsandbytes 4-bit and 8-bit loading and generation on CPU."""

from __future__ import annotations

import warnings

import pytest
import torch

from mp13_engine import Engine, FinishReason, Request
from tests.engine._bnb import needs_bitsandbytes_cpu


@needs_bitsandbytes_cpu
@pytest.mark.parametrize(("quant", "layer"), [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_quantized_load_and_generate_on_cpu(tiny_model_path, quant, layer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bnb warns about CPU casts on every matmul
        with Engine.load(str(tiny_model_path), device="cpu", quantization=quant) as engine:
            kinds = {type(m).__name__ for m in engine.model.modules()}
            assert layer in kinds
            reqs = [
                Request(prompt=f"quantized {i}", max_new_tokens=5, min_new_tokens=5)
                for i in range(3)
            ]
            solo = [
                engine.generate(Request(prompt=r.prompt, max_new_tokens=5, min_new_tokens=5))
                for r in reqs
            ]
            wave = engine.generate_many(reqs)
    assert all(r.finish_reason is FinishReason.LENGTH for r in solo + wave)
    assert all(r.metrics.completion_tokens == 5 for r in solo + wave)
    assert [r.metrics.batch_size for r in wave] == [3, 3, 3]


@needs_bitsandbytes_cpu
def test_8bit_cast_notice_is_silenced(tiny_model_path, caplog):
    """Regression: every 8-bit generate printed "MatMul8bitLt: inputs will be cast ...".

    Since issue 11 item 18 the notice is dropped from the moment an 8-bit model is loaded
    (a filter installed once, see tests/engine/test_quiet.py), not by swapping the
    process-wide warnings filters around every wave.
    """
    from mp13_engine._compat import CAST_NOTICE

    caplog.set_level("WARNING")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Engine.load(str(tiny_model_path), device="cpu", quantization="8bit") as engine:
            assert engine.generate(Request(prompt="quiet", max_new_tokens=4)).ok
    seen = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    assert not [m for m in seen if CAST_NOTICE in m]


def _never_read(*args, **kwargs):
    raise AssertionError("the model was read before bitsandbytes was checked")


@pytest.mark.parametrize("supported", [{"cuda"}, None])
def test_a_bitsandbytes_without_a_cpu_backend_is_refused_before_reading_the_model(
    tiny_model_path, monkeypatch, supported
):
    """Regression: transformers' "None of the available devices ... are supported by the
    bitsandbytes version" came after a GGUF conversion or download, mapped to a ModelLoadError
    that blamed the weight files. ``None``: a release without ``supported_torch_devices``
    (CUDA only)."""
    from mp13_engine import MissingDependencyError, ModelLoadError, _loading

    bitsandbytes = pytest.importorskip("bitsandbytes")

    if supported is None:
        monkeypatch.delattr(bitsandbytes, "supported_torch_devices")
    else:
        monkeypatch.setattr(bitsandbytes, "supported_torch_devices", supported)
    monkeypatch.setattr(_loading, "_resolve_source", _never_read)
    for quant in ("4bit", "8bit"):
        with pytest.raises(MissingDependencyError) as info:
            Engine.load(str(tiny_model_path), device="cpu", quantization=quant)
        message = str(info.value)
        assert isinstance(info.value, ModelLoadError)
        assert f"quantization={quant!r} on cpu" in message
        assert "has no backend for it (only cuda)" in message
        assert message.endswith("or load with quantization=None")
    if not torch.cuda.is_available():  # a device_map places on the CPU only without a GPU
        with pytest.raises(MissingDependencyError, match="on cpu"):
            Engine.load(str(tiny_model_path), device_map="auto", quantization="4bit")


def test_a_missing_bitsandbytes_is_refused_before_reading_the_model(tiny_model_path, monkeypatch):
    import sys

    from mp13_engine import MissingDependencyError, _loading

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # what an uninstalled package does
    with monkeypatch.context() as patch:
        patch.setattr(_loading, "_resolve_source", _never_read)
        with pytest.raises(MissingDependencyError, match=r"needs the bitsandbytes package") as info:
            Engine.load(str(tiny_model_path), device="cpu", quantization="8bit")
    assert "pip install bitsandbytes" in str(info.value)
    with Engine.load(str(tiny_model_path), device="cpu") as engine:  # unquantized: unaffected
        assert engine.generate(Request(prompt="hi", max_new_tokens=2)).ok


@needs_bitsandbytes_cpu
def test_a_gguf_file_and_a_cpu_device_map_load_quantized(tiny_model_factory, tmp_path, monkeypatch):
    """What the README's Quantization section promises beyond a plain checkpoint on a device:
    a GGUF file quantizes like any checkpoint, and a device_map without a GPU keeps every
    layer on the CPU and answers as device='cpu' does. (A GGUF's replies are not compared:
    the tiny GGUF's tokenizer adds no BOS token where the checkpoint's does.)"""
    pytest.importorskip("gguf")
    from tests.engine._tiny_gguf import write_llama_gguf

    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))
    llama = tiny_model_factory("llama3")
    gguf_file = write_llama_gguf(llama, tmp_path / "tiny.gguf")
    request = Request(prompt="Hello there", max_new_tokens=6, min_new_tokens=6)
    for quant, layer in [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")]:
        with Engine.load(str(gguf_file), device="cpu", quantization=quant) as engine:
            assert layer in {type(m).__name__ for m in engine.model.modules()}
            assert engine.generate(request).metrics.completion_tokens == 6
        with Engine.load(str(llama), device="cpu", quantization=quant) as engine:
            reference = engine.generate(request).raw_text
        for placement in [
            {"device_map": "auto", "max_memory": {"cpu": "1GiB"}},
            {"device_map": {"": "cpu"}},
        ]:
            with Engine.load(str(llama), quantization=quant, **placement) as engine:
                assert engine.device == "cpu"
                assert layer in {type(m).__name__ for m in engine.model.modules()}
                assert engine.generate(request).raw_text == reference, placement
