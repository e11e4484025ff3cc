# SPDX-License-Identifier: Apache-2.0
"""bitsandbytes 4-bit and 8-bit loading and generation on CPU."""

from __future__ import annotations

import warnings

import pytest

from mp13_engine import Engine, FinishReason, Request

pytest.importorskip("bitsandbytes")


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
