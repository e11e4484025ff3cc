# SPDX-License-Identifier: MIT
"""The public surface of mp13_context is pinned."""

import pytest

import mp13_context
from mp13_context import EngineClient
from mp13_context.testing import FakeEngine


def _isort_key(name):
    # ruff's RUF022 order (as in the other packages): CONSTANTS, Classes, functions
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_resolves():
    assert mp13_context.__all__ == sorted(mp13_context.__all__, key=_isort_key)
    for name in mp13_context.__all__:
        assert getattr(mp13_context, name) is not None


def test_parameter_names_are_public():
    assert {"temperature", "max_new_tokens", "max_tool_rounds"} <= set(mp13_context.PARAMS)


def test_api_md_names_exist():
    for name in (
        "Session",
        "ChatContext",
        "Cursor",
        "Turn",
        "replay",
        "ReplayReport",
        "SearchHit",
        "EngineClient",
        "ContextError",
    ):
        assert name in mp13_context.__all__


def test_fake_engine_satisfies_the_protocol():
    assert isinstance(FakeEngine(), EngineClient)


def test_context_errors_are_mp13_errors():
    from mp13_toolbox import Mp13Error

    assert issubclass(mp13_context.ContextError, Mp13Error)
    for name in (
        "CursorError",
        "CommandError",
        "StoreError",
        "SchemaError",
        "NotFoundError",
        "SerializationError",
    ):
        assert issubclass(getattr(mp13_context, name), mp13_context.ContextError)


def test_the_parameter_registry_is_read_only():
    with pytest.raises(TypeError):
        mp13_context.PARAMS["temperature"] = lambda name, value: value
    with pytest.raises(TypeError):
        del mp13_context.PARAMS["seed"]
    assert "temperature" in mp13_context.PARAMS  # a live view of the registry
