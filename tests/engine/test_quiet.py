# SPDX-License-Identifier: Apache-2.0
"""bitsandbytes' 8-bit cast notice is silenced once at load, never by swapping filters per wave.

Issue 11 item 18: the engine used to wrap every wave and training step in
``warnings.catch_warnings()``, which replaces the process-wide filter list from
the worker thread, so filters that other threads (another engine, the user)
installed meanwhile could be lost.
"""

from __future__ import annotations

import logging
import threading
import warnings

import pytest

from mp13_engine import Engine, Request
from mp13_engine._compat import BNB_LOGGER, CAST_NOTICE, DropCastNotice

pytest.importorskip("bitsandbytes")


def _ours() -> list:
    return [f for f in logging.getLogger(BNB_LOGGER).filters if isinstance(f, DropCastNotice)]


@pytest.fixture
def clean_bnb_logger():
    logger = logging.getLogger(BNB_LOGGER)
    saved = list(logger.filters)
    for f in _ours():
        logger.removeFilter(f)
    yield logger
    logger.filters[:] = saved


def test_waves_leave_the_process_warning_filters_alone(tiny_model_path):
    """Two engines generate in threads while this thread watches the filter list and adds
    its own filters: the list object never changes and nothing added is lost."""
    with warnings.catch_warnings():
        engines = [Engine.load(str(tiny_model_path), device="cpu") for _ in range(2)]
        try:
            stop = threading.Event()

            def serve(engine) -> None:
                while not stop.is_set():
                    engine.generate_many([Request(prompt="hi", max_new_tokens=3)] * 2)

            threads = [threading.Thread(target=serve, args=(e,)) for e in engines]
            for t in threads:
                t.start()
            original = warnings.filters
            seen_other_list = False
            mine = []
            for i in range(300):
                seen_other_list |= warnings.filters is not original
                if i % 10 == 0:
                    text = f"mp13 test filter {i}"
                    warnings.filterwarnings("error", message=text)
                    mine.append(text)
                threading.Event().wait(0.002)
            stop.set()
            for t in threads:
                t.join(30)
            patterns = {getattr(f[1], "pattern", None) for f in warnings.filters}
        finally:
            for e in engines:
                e.close()
    assert not seen_other_list
    assert set(mine) <= patterns


def test_a_plain_model_installs_no_filter(tiny_model_path, clean_bnb_logger):
    before = list(warnings.filters)
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        assert engine.generate(Request(prompt="hi", max_new_tokens=2)).ok
    assert _ours() == [] and warnings.filters == before


def test_an_8bit_model_drops_only_the_cast_notice_and_installs_it_once(
    tiny_model_path, clean_bnb_logger, caplog
):
    path = str(tiny_model_path)
    with (
        warnings.catch_warnings(),
        Engine.load(path, device="cpu", quantization="8bit") as one,
        Engine.load(path, device="cpu", quantization="8bit"),
    ):
        assert len(_ours()) == 1
        caplog.set_level("WARNING", logger=BNB_LOGGER)
        assert one.generate(Request(prompt="quiet", max_new_tokens=3)).ok
        ours = [f for f in warnings.filters if getattr(f[1], "pattern", "") == CAST_NOTICE]
        assert len(ours) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if CAST_NOTICE in m]
    clean_bnb_logger.warning("bitsandbytes says something else")
    assert "bitsandbytes says something else" in [r.getMessage() for r in caplog.records]


@pytest.mark.slow  # two fresh processes import torch, transformers and peft
def test_training_on_a_plain_model_does_not_advise_installing_kernels(tiny_model_path):
    """A fresh process loads a float model and trains a LoRA step (PEFT imports
    bitsandbytes): the import-time 'pip install kernels' notice, about a 4-bit kernel
    mp13 never uses, is not printed; without the engine's filter it is (on CPUs where
    bitsandbytes says it at all)."""
    import subprocess
    import sys

    from mp13_engine._compat import KERNELS_NOTICE

    script = (
        "import sys\n"
        "from mp13_engine import Engine, TrainingConfig\n"
        "if sys.argv[2] == 'bare':\n"
        "    import peft\n"
        "    raise SystemExit(0)\n"
        "with Engine.load(sys.argv[1], device='cpu', adapters_dir=sys.argv[3]) as e:\n"
        "    job = e.train(TrainingConfig(adapter='q', dataset=[{'text': 'hello'}], max_steps=1))\n"
        "    assert job.result().steps == 1\n"
    )

    def stderr(mode: str, tmp: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, str(tiny_model_path), mode, tmp],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if KERNELS_NOTICE not in stderr("bare", tmp):
            pytest.skip("bitsandbytes gives the kernels notice only on CPUs with AVX512-BF16")
        assert KERNELS_NOTICE not in stderr("engine", tmp)
