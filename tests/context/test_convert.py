# SPDX-License-Identifier: MIT
"""Round trips through the package's one converter, for every stored type (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_context import (
    Command,
    CommandKind,
    EffectiveSettings,
    Node,
    NodeKind,
    Role,
    SerializationError,
    SystemMode,
    SystemPrompt,
    Turn,
)
from mp13_context._convert import dumps, loads, structure
from mp13_engine import FinishReason, RequestMetrics
from mp13_toolbox import ToolCall, ToolResult, ToolsScope

TEXT = st.text(max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
CALLS = st.builds(ToolCall, TEXT, st.dictionaries(TEXT, JSON, max_size=3), st.none() | TEXT)
RESULTS = st.builds(ToolResult, TEXT, TEXT, st.none() | TEXT, st.booleans(), st.booleans())
METRICS = st.builds(
    RequestMetrics,
    prompt_tokens=st.integers(0, 99),
    completion_tokens=st.integers(0, 99),
    ttft_s=st.none() | st.floats(0, 10),
    adapters=st.lists(TEXT, max_size=2),
)
TURNS = st.builds(
    Turn,
    role=st.sampled_from(Role),
    text=TEXT,
    reasoning=TEXT,
    tool_calls=st.lists(CALLS, max_size=2),
    tool_results=st.lists(RESULTS, max_size=2),
    finish_reason=st.none() | st.sampled_from(FinishReason),
    metrics=st.none() | METRICS,
    truncated=st.booleans(),
    cancelled=st.booleans(),
    continuation=st.booleans(),
    auto=st.booleans(),
    error=st.none() | TEXT,
    parse_errors=st.lists(TEXT, max_size=2),
)
SCOPES = st.builds(
    ToolsScope,
    st.dictionaries(
        st.text(min_size=1, max_size=5),
        st.sampled_from(["silent", "advertised", "disabled"]),
        max_size=3,
    ),
    label=TEXT,
)
COMMANDS = st.builds(
    Command,
    kind=st.sampled_from(CommandKind),
    text=st.none() | TEXT,
    names=st.lists(TEXT, max_size=2),
    scope=st.none() | SCOPES,
    params=st.dictionaries(TEXT, JSON, max_size=2),
    data=st.dictionaries(TEXT, JSON, max_size=2),
    created_at=st.floats(0, 2e9),
)
STATES = st.builds(
    EffectiveSettings,
    system=st.builds(SystemPrompt, st.sampled_from(SystemMode), TEXT),
    adapters=st.none() | st.lists(TEXT, max_size=2).map(tuple),
    tool_scopes=st.lists(SCOPES, max_size=2),
    params=st.dictionaries(TEXT, JSON, max_size=2),
    system_prev=st.none() | st.integers(1, 99),
    adapters_prev=st.none() | st.integers(1, 99),
    tools_prev=st.none() | st.integers(1, 99),
)
NODES = st.builds(
    Node,
    id=TEXT,
    conversation_id=TEXT,
    parent_id=st.none() | TEXT,
    kind=st.sampled_from(NodeKind),
    depth=st.integers(0, 9),
    seq=st.integers(0, 9),
    turn=st.none() | TURNS,
    commands=st.lists(COMMANDS, max_size=2),
    archived=st.booleans(),
    main_line=st.booleans(),
    label=TEXT,
    created_at=st.floats(0, 2e9),
)


@pytest.mark.parametrize(
    ("strategy", "cls"),
    [(TURNS, Turn), (COMMANDS, Command), (STATES, EffectiveSettings), (NODES, Node)],
)
def test_round_trip(strategy, cls):
    @settings(max_examples=40, deadline=None)
    @given(strategy)
    def check(value):
        text = dumps(value)
        assert loads(text, cls) == value
        if cls is Command:  # created_at is not part of equality; it must survive anyway
            assert loads(text, cls).created_at == value.created_at

    check()


def test_turn_node_id_is_not_stored():
    turn = Turn(role=Role.USER, text="x", node_id="n1")
    assert "node_id" not in json.loads(dumps(turn))


def test_shape_errors_are_serialization_errors_with_readable_text():
    with pytest.raises(SerializationError, match="not a valid Turn"):
        structure({"role": "robot"}, Turn)


def test_turn_sequences_take_none_or_a_single_string():
    turn = Turn(role=Role.ASSISTANT, tool_calls=None, parse_errors="unclosed <tool_call>")
    assert turn.tool_calls == () and turn.parse_errors == ("unclosed <tool_call>",)
    assert loads(dumps(turn), Turn) == turn


def test_a_refused_scope_says_why():
    raw = {"kind": "tools.add", "scope": {"modes": {"": "silent"}}, "at": 1.0}
    with pytest.raises(SerializationError) as err:
        structure(raw, Command)
    assert "a scope target must be a non-empty tool name or pattern: ''" in str(err.value)
