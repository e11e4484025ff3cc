# SPDX-License-Identifier: MIT
"""The algebra of ToolsScope layers resolved into ToolsView (hypothesis properties)."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mp13_toolbox import ToolMode, ToolsScope, ToolsView

NAMES = ["calc", "clock", "web_get", "web_post", "help"]
TARGETS = [*NAMES, "*", "web_*", "c*", "nothing_matches"]

modes = st.sampled_from(list(ToolMode))
layers = st.dictionaries(st.sampled_from(TARGETS), modes, max_size=5).map(ToolsScope)
bases = st.fixed_dictionaries({n: modes for n in NAMES}).map(ToolsView)
stacks = st.lists(layers, max_size=5)


@given(bases, stacks, stacks, stacks)
def test_stacking_is_associative(base, a, b, c):
    assert base.stack(a).stack(b).stack(c) == base.stack(a).stack([*b, *c])
    assert base.stack([*a, *b]).stack(c) == base.stack(a).stack([*b, *c])


@given(bases, layers)
def test_a_repeated_layer_is_idempotent(base, layer):
    once = base.apply(layer)
    assert once.apply(layer) == once


@given(bases, stacks)
def test_the_empty_layer_is_the_identity(base, stack):
    empty = ToolsScope()
    assert base.apply(empty) == base
    assert base.stack([empty, *stack, empty]) == base.stack(stack)


@given(bases, stacks, st.sampled_from(NAMES))
def test_disabled_in_the_last_layer_always_disables(base, stack, name):
    last = ToolsScope({name: ToolMode.DISABLED})
    view = base.stack([*stack, last])
    assert view.mode(name) is ToolMode.DISABLED
    assert not view.callable(name)
    assert name not in view.advertised()


@given(bases, stacks, modes)
def test_star_in_the_last_layer_sets_every_tool(base, stack, mode):
    view = base.stack([*stack, ToolsScope.all(mode)])
    assert set(view.modes.values()) == {mode}


@given(bases, layers, st.sampled_from(NAMES))
def test_within_a_layer_the_strongest_matching_entry_wins(base, layer, name):
    strength = {ToolMode.SILENT: 0, ToolMode.ADVERTISED: 1, ToolMode.DISABLED: 2}
    hits = [m for t, m in layer.modes.items() if fnmatch.fnmatchcase(name, t)]
    expected = max(hits, key=strength.__getitem__) if hits else base.mode(name)
    assert base.apply(layer).mode(name) is expected


@given(bases, stacks)
def test_resolution_never_invents_tools(base, stack):
    assert set(base.stack(stack).modes) == set(base.modes)


def test_examples_from_the_docs():
    base = ToolsView.resolve({n: "advertised" for n in NAMES})
    view = base.apply(ToolsScope({"*": "silent", "calc": "advertised"}))
    assert view.advertised() == ["calc"]
    assert view.silent() == ["clock", "help", "web_get", "web_post"]
    # An exact name does not beat "*" inside one layer: disabled is stronger ...
    one = base.apply(ToolsScope({"*": "disabled", "calc": "advertised"}))
    assert one.advertised() == []
    # ... so an allow-list takes two layers; later layers win.
    two = base.stack([ToolsScope({"*": "disabled"}), ToolsScope({"calc": "advertised"})])
    assert two.advertised() == ["calc"] and two.disabled() == [
        n for n in sorted(NAMES) if n != "calc"
    ]
    assert base.apply(ToolsScope({"web_*": "disabled"})).disabled() == ["web_get", "web_post"]


def test_unknown_names_are_not_callable_and_modes_accept_strings():
    view = ToolsView({"calc": "silent"})
    assert view.callable("calc") and not view.callable("ghost")
    assert view.mode("ghost") is None
    assert ToolsScope({"calc": "disabled"}) == ToolsScope({"calc": ToolMode.DISABLED})
    assert hash(ToolsScope({"a": "silent"})) == hash(ToolsScope({"a": ToolMode.SILENT}))
    with pytest.raises(ValueError, match="advertised, silent, disabled"):
        ToolsScope({"calc": "hidden"})
