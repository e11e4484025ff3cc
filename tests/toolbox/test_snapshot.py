# SPDX-License-Identifier: MIT
"""Toolbox snapshots: cattrs round trips, relinking by name, unresolved tools never run."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mp13_toolbox import (
    Approval,
    ApprovalAnswer,
    Risk,
    Toolbox,
    ToolboxSnapshot,
    ToolCall,
    ToolKind,
    ToolMode,
    ToolRecord,
    ToolSnapshotError,
    ToolSpec,
)

names = st.text("abcdefghij_", min_size=1, max_size=8)
records = st.builds(
    ToolRecord,
    spec=st.builds(
        ToolSpec,
        name=names,
        description=st.text(max_size=20),
        parameters=st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={"properties": st.dictionaries(names, st.just({"type": "string"}))},
        ),
    ),
    mode=st.sampled_from(list(ToolMode)),
    risk=st.sampled_from(list(Risk)),
    approval=st.none() | st.sampled_from(list(Approval)),
    timeout_s=st.none() | st.floats(0.1, 100),
    kind=st.sampled_from(list(ToolKind)),
)
remembered_answers = st.sampled_from([ApprovalAnswer.ALWAYS, ApprovalAnswer.NEVER])
risks = st.sampled_from(list(Risk))
approvals = st.sampled_from(list(Approval))
snapshots = st.builds(
    ToolboxSnapshot,
    tools=st.lists(records, max_size=4, unique_by=lambda r: r.spec.name).map(tuple),
    remembered=st.dictionaries(
        names, st.sampled_from([ApprovalAnswer.ALWAYS, ApprovalAnswer.NEVER])
    ),
    approval_defaults=st.dictionaries(st.sampled_from(list(Risk)), st.sampled_from(list(Approval))),
    max_output_chars=st.none() | st.integers(1, 10**6),
    default_timeout_s=st.none() | st.floats(0.1, 100),
)


@given(snapshots)
def test_snapshot_round_trips_through_dicts_and_json(state):
    assert ToolboxSnapshot.from_dict(state.to_dict()) == state
    assert ToolboxSnapshot.from_json(state.to_json()) == state
    json.dumps(state.to_dict())  # plain JSON data


def weather(city: str, days: int = 1) -> str:
    """Forecast.

    Args:
        city: Where.
        days: How many days.
    """
    return f"{city}:{days}"


def test_toolbox_round_trip_relinks_functions_builtins_and_handlers():
    tb = Toolbox(builtins=["calculator"], max_output_chars=500, default_timeout_s=3.0)
    tb.register(weather, risk="medium", mode="silent", description="Custom text")
    tb.register_external({"name": "ext", "parameters": {"type": "object"}}, lambda c: "e")
    tb.remember("weather", "always")
    tb.set_approval("calculator", "ask")
    state = tb.snapshot()

    restored = Toolbox.from_snapshot(
        ToolboxSnapshot.from_json(state.to_json()),
        functions=[weather],
        handlers={"ext": lambda c: "e2"},
    )
    assert restored.snapshot() == state
    assert restored.unresolved() == []
    assert restored.get("weather").description == "Custom text"
    # the remembered "always" still holds, so no approver is needed for a medium-risk tool
    assert restored.execute(ToolCall("weather", {"city": "Oslo"})).content == "Oslo:1"
    assert restored.execute(ToolCall("ext")).content == "e2"
    r = restored.execute(ToolCall("calculator", {"expression": "1+1"}), approval=lambda q: True)
    assert r.content == "2"


def test_tools_that_cannot_be_relinked_are_listed_and_never_run():
    tb = Toolbox()
    tb.register(weather)
    tb.register_external({"name": "ext", "parameters": {"type": "object"}}, lambda c: "e")
    state = tb.snapshot()

    restored = Toolbox.from_snapshot(state)  # no callables given
    assert restored.unresolved() == ["weather", "ext"]
    assert [t.resolved for t in restored.list()] == [False, False]
    assert restored.specs() == []  # never advertised
    r = restored.execute(ToolCall("weather", {"city": "x"}))
    assert r.is_error and "not available in this session" in r.content
    # saving again keeps them, so nothing is lost until they can be relinked
    assert restored.snapshot() == state
    # relinking later: register the function, then restore the snapshot again
    restored.register(weather)
    assert restored.restore(state) == ["ext"]
    assert restored.execute(ToolCall("weather", {"city": "y"})).content == "y:1"


def test_restore_keeps_tools_absent_from_the_snapshot_and_saved_settings_win():
    tb = Toolbox()
    tb.register(weather)
    state = tb.snapshot()
    other = Toolbox()
    other.register(weather, mode="disabled")
    other.register(lambda: "k", name="kept")
    assert other.restore(state) == []
    assert other.get("weather").mode is ToolMode.ADVERTISED
    assert "kept" in other


@pytest.mark.parametrize(
    "data",
    [
        {"tools": [{"spec": {"name": "x"}, "mode": "sideways"}]},
        {"tools": "nope"},
        {"version": 99},
    ],
)
def test_malformed_snapshot_raises_a_readable_error(data):
    with pytest.raises(ToolSnapshotError, match="toolbox snapshot"):
        ToolboxSnapshot.from_dict(data)
    with pytest.raises(ToolSnapshotError, match="not valid JSON"):
        ToolboxSnapshot.from_json("{")


def test_saved_settings_of_the_wrong_type_are_refused_not_restored():
    # These once came back as saved ('x' as the output cap), and every later call of
    # the restored toolbox raised instead of returning a result.
    good = Toolbox(builtins=["calculator"]).snapshot().to_dict()
    with pytest.raises(ToolSnapshotError) as err:
        ToolboxSnapshot.from_dict({**good, "max_output_chars": "x"})
    assert str(err.value) == (
        "toolbox snapshot is malformed: invalid value for type, expected int | None "
        "('x' is none of int | None) @ $.max_output_chars; pass data made by "
        "ToolboxSnapshot.to_dict()"
    )
    tools = [{**good["tools"][0], "timeout_s": "soon"}]
    with pytest.raises(ToolSnapshotError, match=r"expected float \| None .* @ \$\.tools\[0\]"):
        ToolboxSnapshot.from_dict({**good, "tools": tools})
    assert ToolboxSnapshot.from_dict(good) == Toolbox(builtins=["calculator"]).snapshot()


def test_restore_takes_functions_as_a_name_map():
    tb = Toolbox()
    tb.register(weather, name="forecast")
    restored = Toolbox.from_snapshot(tb.snapshot(), functions={"forecast": weather})
    assert restored.unresolved() == []
    assert restored.execute(ToolCall("forecast", {"city": "Oslo"})).content == "Oslo:1"


def _weather(city: str) -> str:
    """Weather.

    Args:
        city: a city
    """
    return city


@pytest.mark.parametrize(
    ("functions", "problem"),
    [
        (_weather, "functions is a list of functions, not <function _weather"),
        ("_weather", "functions is a list of functions, not '_weather'"),
        ([_weather, 5], "functions holds 5, not a named function"),
        ({"_weather": "no"}, "functions['_weather'] is not a named function"),
    ],
)
def test_functions_that_are_not_functions_are_a_snapshot_error(functions, problem):
    # One function raised a bare TypeError, a string an AttributeError.
    tb = Toolbox()
    tb.register(_weather)
    with pytest.raises(ToolSnapshotError) as err:
        Toolbox.from_snapshot(tb.snapshot(), functions=functions)
    assert str(err.value).startswith(problem)
    assert str(err.value).endswith("pass functions=[f, ...] or a {name: function} map")


def test_handlers_that_are_not_a_map_are_a_snapshot_error():
    with pytest.raises(ToolSnapshotError, match=r"^handlers is a \{tool name: handler\} map"):
        Toolbox.from_snapshot(Toolbox().snapshot(), handlers=[_weather])


@pytest.mark.parametrize("data", [[1], "snapshot", None])
def test_a_snapshot_that_is_no_object_says_so(data):
    # It was refused as "version None is not supported".
    with pytest.raises(ToolSnapshotError, match=r"^a toolbox snapshot is a JSON object"):
        ToolboxSnapshot.from_dict(data)
    with pytest.raises(ToolSnapshotError, match=r"^a toolbox snapshot is a JSON object"):
        ToolboxSnapshot.from_json(json.dumps(data))
