# SPDX-License-Identifier: Apache-2.0
"""An adapter name is a name: training never writes outside adapters_dir (issue 11, item 16)."""

from __future__ import annotations

import pytest

from mp13_engine import AdapterError, ConfigError, Engine, TrainingConfig

ROWS = [{"prompt": "Capital of Zorbia?", "completion": " Flumptown."}] * 2


@pytest.mark.parametrize(
    "name",
    ["/abs/path", "../x", "a/b", "a\\b", "C:evil", "..", "x.y", "__base__", "", " padded", "a\nb"],
)
def test_a_path_or_reserved_name_is_refused_with_where_it_would_be_saved(name):
    with pytest.raises(ConfigError) as info:
        TrainingConfig(adapter=name, dataset=ROWS)
    message = str(info.value)
    assert "TrainingConfig.adapter" in message
    assert "plain name" in message and "adapters_dir/<name>" in message and "output_dir" in message


def test_the_message_says_a_name_is_not_a_path():
    with pytest.raises(ConfigError, match="a name, not a path") as info:
        TrainingConfig(adapter="/tmp/evil", dataset=ROWS)
    assert "'/'" in str(info.value)


@pytest.mark.parametrize("name", ["mine", "pirate-v2", "Zorbia_facts", "日本語"])
def test_plain_names_are_accepted(name):
    assert TrainingConfig(adapter=name, dataset=ROWS).adapter == name


def test_a_trained_adapter_lands_under_adapters_dir(tiny_model_path, tmp_path):
    outside = tmp_path / "outside"
    adapters = tmp_path / "adapters"
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapters)) as engine:
        with pytest.raises(ConfigError):
            engine.train(TrainingConfig(adapter=str(outside), dataset=ROWS, max_steps=1))
        result = engine.train(
            TrainingConfig(adapter="inside", dataset=ROWS, max_steps=1, batch_size=2)
        ).result(timeout=120)
    assert result.path == str((adapters / "inside").resolve())
    assert not outside.exists()


def test_loading_an_adapter_under_a_path_name_is_refused(tiny_model_path, tmp_path):
    with (
        Engine.load(str(tiny_model_path), device="cpu") as engine,
        pytest.raises(AdapterError, match="not a path"),
    ):
        engine.adapters.load(tmp_path / "missing", name="a/b")
