# SPDX-License-Identifier: Apache-2.0
"""``adapter_names``: the one reading of ``Request.adapters`` (and of default adapters)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mp13_engine import BASE_ADAPTER, AdapterSource, Engine, Request, adapter_names

NAMES = st.sampled_from(["a", "b", "c", BASE_ADAPTER])


@pytest.mark.parametrize(
    ("adapters", "defaults", "expected"),
    [
        (None, (), ()),
        (None, ("a", "b"), ("a", "b")),
        (None, ("a", BASE_ADAPTER, "a"), ("a",)),
        ([], ("a",), ()),
        (BASE_ADAPTER, ("a",), ()),
        ([BASE_ADAPTER], ("a",), ()),
        ("a", (), ("a",)),
        (["b", "a", BASE_ADAPTER, "b"], (), ("b", "a")),
        (("a",), ("b",), ("a",)),
    ],
)
def test_examples(adapters, defaults, expected):
    assert adapter_names(adapters, defaults) == expected


@given(st.lists(NAMES), st.lists(NAMES))
def test_each_name_once_in_first_order_without_the_base(adapters, defaults):
    got = adapter_names(adapters, defaults)
    assert BASE_ADAPTER not in got and len(set(got)) == len(got)
    assert list(got) == [
        n for i, n in enumerate(adapters) if n != BASE_ADAPTER and n not in adapters[:i]
    ]
    assert adapter_names(None, defaults) == adapter_names(defaults)
    assert adapter_names(got) == got  # already normal


@pytest.fixture(scope="module")
def engine(tiny_model_path, tmp_path_factory):
    from tests.engine.test_adapters import _peft_adapter

    root = tmp_path_factory.mktemp("names")
    _peft_adapter(tiny_model_path, root / "a", seed=1)
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(root)) as eng:
        info = eng.adapters.load("a")
        assert info.source is AdapterSource.LOADED
        yield eng


def test_defaults_are_read_the_same_way(engine):
    engine.adapters.set_default(["a", BASE_ADAPTER, "a"])
    try:
        assert engine.adapters.defaults == ("a",)
        request = Request(prompt="Hello", max_new_tokens=6)
        assert (
            engine.generate(request).raw_text
            == engine.generate(
                Request(prompt="Hello", adapters=["a", "a"], max_new_tokens=6)
            ).raw_text
        )
        engine.adapters.set_default(BASE_ADAPTER)
        assert engine.adapters.defaults == ()
    finally:
        engine.adapters.set_default(None)
