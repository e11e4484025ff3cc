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


def _specificity(target, name):
    if target == name:
        return 2
    if not fnmatch.fnmatchcase(name, target):
        return None
    return 0 if target == "*" else 1


@given(bases, layers, st.sampled_from(NAMES))
def test_within_a_layer_the_most_specific_then_the_strongest_entry_wins(base, layer, name):
    strength = {ToolMode.SILENT: 0, ToolMode.ADVERTISED: 1, ToolMode.DISABLED: 2}
    hits = [(_specificity(t, name), m) for t, m in layer.modes.items()]
    hits = [(level, m) for level, m in hits if level is not None]
    if not hits:
        assert base.apply(layer).mode(name) is base.mode(name)
        return
    top = max(level for level, _ in hits)
    expected = max((m for level, m in hits if level == top), key=strength.__getitem__)
    assert base.apply(layer).mode(name) is expected


@given(bases, st.sampled_from(NAMES), modes, modes)
def test_a_name_beats_the_star_written_next_to_it(base, name, star, own):
    view = base.apply(ToolsScope({"*": star, name: own}))
    assert view.mode(name) is own
    assert all(view.mode(n) is star for n in NAMES if n != name)


@given(bases, st.sampled_from(["web_get", "web_post"]), modes, modes, modes)
def test_a_pattern_beats_star_and_loses_to_the_exact_name(base, name, star, pattern, own):
    layer = ToolsScope({"*": star, "web_*": pattern})
    assert base.apply(layer).mode(name) is pattern
    assert base.apply(ToolsScope({**layer.modes, name: own})).mode(name) is own


@given(bases, stacks)
def test_resolution_never_invents_tools(base, stack):
    assert set(base.stack(stack).modes) == set(base.modes)


def test_examples_from_the_docs():
    base = ToolsView.resolve({n: "advertised" for n in NAMES})
    view = base.apply(ToolsScope({"*": "silent", "calc": "advertised"}))
    assert view.advertised() == ["calc"]
    assert view.silent() == ["clock", "help", "web_get", "web_post"]
    # An allow-list is one layer: the exact name beats the "*" written next to it ...
    one = base.apply(ToolsScope({"*": "disabled", "calc": "advertised"}))
    assert one.advertised() == ["calc"]
    assert one.disabled() == [n for n in sorted(NAMES) if n != "calc"]
    # ... and two layers still say the same (later layers win).
    two = base.stack([ToolsScope({"*": "disabled"}), ToolsScope({"calc": "advertised"})])
    assert two == one
    # Equally specific entries: the strongest mode wins.
    both = base.apply(ToolsScope({"web_*": "advertised", "w*": "disabled"}))
    assert both.disabled() == ["web_get", "web_post"]
    assert base.apply(ToolsScope({"web_*": "disabled"})).disabled() == ["web_get", "web_post"]


# --- the ceiling: layers resolved over global modes only narrow them -----------------

EXPOSURE = {ToolMode.DISABLED: 0, ToolMode.SILENT: 1, ToolMode.ADVERTISED: 2}


@given(bases, stacks)
def test_resolved_layers_are_never_wider_than_the_global_modes(base, stack):
    view = ToolsView.resolve(base.modes, stack)
    assert view.within(base)
    for name in NAMES:
        assert EXPOSURE[view.mode(name)] <= EXPOSURE[base.mode(name)]
        if not base.callable(name):
            assert not view.callable(name)
        if name not in base.advertised():
            assert name not in view.advertised()


@given(bases, stacks)
def test_under_a_ceiling_layers_act_as_without_one_where_they_narrow(base, stack):
    free = base.stack(stack)
    capped = ToolsView.resolve(base.modes, stack)
    for name in NAMES:
        if EXPOSURE[free.mode(name)] <= EXPOSURE[base.mode(name)]:
            assert capped.mode(name) is free.mode(name)
        else:
            assert capped.mode(name) is base.mode(name)


@given(bases, stacks, stacks)
def test_capping_is_idempotent_and_within_is_its_test(base, a, b):
    view = base.stack(a)
    assert view.capped(base).capped(base) == view.capped(base)
    assert view.capped(base).within(base)
    assert view.within(base) == (view.capped(base) == view)
    # what is within a narrower view is within the wider one too
    narrow = ToolsView.resolve(base.modes, b)
    assert view.capped(narrow).within(base)


def test_the_ceiling_in_examples():
    base = {"calc": "advertised", "clock": "silent", "web_get": "disabled"}
    view = ToolsView.resolve(base, [ToolsScope({"*": "advertised"})])
    assert view.to_dict() == base  # "*": advertised cannot widen anything
    view = ToolsView.resolve(base, [ToolsScope({"*": "disabled", "clock": "advertised"})])
    assert view.to_dict() == {"calc": "disabled", "clock": "silent", "web_get": "disabled"}
    assert not ToolsView({"ghost": "silent"}).within(ToolsView(base))
    assert ToolsView({"ghost": "disabled"}).within(ToolsView(base))
    assert ToolsView({"calc": "silent", "ghost": "advertised"}).capped(ToolsView(base)) == (
        ToolsView({"calc": "silent"})
    )


def test_unknown_names_are_not_callable_and_modes_accept_strings():
    view = ToolsView({"calc": "silent"})
    assert view.callable("calc") and not view.callable("ghost")
    assert view.mode("ghost") is None
    assert ToolsScope({"calc": "disabled"}) == ToolsScope({"calc": ToolMode.DISABLED})
    assert hash(ToolsScope({"a": "silent"})) == hash(ToolsScope({"a": ToolMode.SILENT}))
    assert ToolsScope(None) == ToolsScope({}) and ToolsView(None).modes == {}
    # Views are values: equal views hash alike, whatever the order of their modes.
    views = {
        ToolsView({"a": "silent", "b": "advertised"}),
        ToolsView({"b": "advertised", "a": "silent"}),
    }
    assert views == {ToolsView({"a": ToolMode.SILENT, "b": ToolMode.ADVERTISED})}
    with pytest.raises(ValueError, match="advertised, silent, disabled"):
        ToolsScope({"calc": "hidden"})
