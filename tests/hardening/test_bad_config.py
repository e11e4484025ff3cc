# SPDX-License-Identifier: MIT
"""Configs with values of the wrong type or out of range fail where they are built.

Every case is a ``ConfigError`` naming the field, never a raw ``TypeError``/
``OverflowError`` later, never a value silently read as its opposite (cattrs
turned ``"false"`` into ``True``: a JSON config saying ``"trust_remote_code":
"false"`` ran remote code), and never a config that passes validation and then
takes the engine down (``batch_wait_ms=1e300`` killed the worker thread on the first
request).
"""

from __future__ import annotations

import json

import pytest

from mp13_engine import ConfigError, Engine, EngineConfig, Request, TrainingConfig

ROWS = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("trust_remote_code", "false"),
        ("trust_remote_code", 0),
        ("download", "false"),
        ("download", "no"),
        ("max_batch_size", "8"),
        ("max_batch_size", 8.7),
        ("default_max_new_tokens", "256"),
        ("prefill_chunk_tokens", 512.5),
        ("batch_wait_ms", "2"),
        ("batch_wait_ms", 1e300),
        ("batch_wait_ms", float("nan")),
        ("batch_wait_ms", float("inf")),
        ("prefix_cache_mb", float("inf")),
        ("prefix_cache_mb", float("nan")),
        ("adapters_dir", 123),
        ("tool_format", 5),
        ("model", 5),
        ("dtype", 16),
    ],
)
def test_a_config_value_of_the_wrong_type_or_range_is_refused_by_name(field, value, tmp_path):
    with pytest.raises(ConfigError, match=field):
        EngineConfig.from_dict({"model": "m", field: value})
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"model": "m", field: value}), encoding="utf-8")
    with pytest.raises(ConfigError, match=field):
        EngineConfig.from_json(path)
    if field != "model":
        with pytest.raises(ConfigError, match=field):
            EngineConfig(model="m", **{field: value})


@pytest.mark.parametrize("data", [5, "model=m", ["model", "m"]])
def test_from_dict_refuses_what_is_not_a_dict(data):
    with pytest.raises(ConfigError, match="from_dict takes a dict of config fields, not"):
        EngineConfig.from_dict(data)


def test_json_configs_keep_their_values_exactly():
    data = {"model": "m", "batch_wait_ms": 5, "prefix_cache_mb": 1.5, "download": True}
    config = EngineConfig.from_dict(data)
    assert (config.batch_wait_ms, config.prefix_cache_mb, config.download) == (5, 1.5, True)
    assert EngineConfig.from_dict(config.to_dict()) == config


def test_the_longest_collect_wait_still_serves(tiny):
    # The bound keeps the idle worker's sleep within what the platform can wait for.
    with Engine.load(str(tiny), device="cpu", batch_wait_ms=60_000, max_batch_size=1) as engine:
        assert engine.generate(Request(prompt="hi", max_new_tokens=2)).ok
        assert not engine.closed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target_modules", 123),
        ("target_modules", None),
        ("target_modules", {"q_proj": 1}),
        ("shuffle", "no"),
        ("gradient_checkpointing", "false"),
        ("continue_training", 1),
        ("output_dir", 123),
        ("resume_from", 5),
        ("seed", 2**70),
        ("seed", 2**32),
        ("seed", -1),
    ],
)
def test_a_training_config_value_of_the_wrong_type_is_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=field):
        TrainingConfig(adapter="x", dataset=ROWS, **{field: value})


def test_the_largest_training_seed_trains(tiny, tmp_path):
    config = TrainingConfig(
        adapter="seeded",
        dataset=ROWS * 2,
        max_steps=1,
        batch_size=1,
        seed=2**32 - 1,
        output_dir=str(tmp_path / "seeded"),
    )
    with Engine.load(str(tiny), device="cpu") as engine:
        assert engine.train(config).result(timeout=120).steps == 1
