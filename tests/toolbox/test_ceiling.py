# SPDX-License-Identifier: MIT
"""The toolbox is a ceiling: no scope layer and no view runs a tool with less protection.

Layers come from conversations, imported documents and users; the toolbox's own
settings (global modes, approvals, risk policy) come from the operator. Whatever
the layers say, a view is never wider than the toolbox's and execution applies the
toolbox's mode and approval to every call.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_toolbox import Toolbox, ToolCall, ToolMode, ToolsScope, ToolsView

NAMES = ["calc", "clock", "web_get", "web_post"]
TARGETS = [*NAMES, "*", "web_*", "c*"]
modes = st.sampled_from(list(ToolMode))
layers = st.dictionaries(st.sampled_from(TARGETS), modes, max_size=4).map(ToolsScope)
stacks = st.lists(layers, max_size=4)
global_modes = st.fixed_dictionaries({n: modes for n in NAMES})


def toolbox(modes_by_name: dict[str, ToolMode], ran: list[str]) -> Toolbox:
    tb = Toolbox(default_timeout_s=None)
    for name in NAMES:

        def tool(name: str = name) -> str:
            ran.append(name)
            return f"{name} ran"

        tb.register(tool, name=name, mode=modes_by_name[name])
    return tb


@settings(max_examples=60, deadline=None)
@given(global_modes, stacks)
def test_for_any_layers_the_view_is_never_wider_than_the_toolbox(modes_by_name, stack):
    ran: list[str] = []
    tb = toolbox(modes_by_name, ran)
    operator, view = tb.view(), tb.view(stack)
    assert view.within(operator)
    advertised = {s["function"]["name"] for s in tb.specs(view)}
    assert advertised <= {n for n, m in modes_by_name.items() if m is ToolMode.ADVERTISED}
    for name in NAMES:
        result = tb.execute(ToolCall(name), view)
        if modes_by_name[name] is ToolMode.DISABLED:
            assert result.is_error and "disabled" in result.content
    assert not {n for n in ran if modes_by_name[n] is ToolMode.DISABLED}


@settings(max_examples=40, deadline=None)
@given(global_modes, st.dictionaries(st.sampled_from(NAMES), modes))
def test_a_hand_made_view_cannot_run_or_advertise_past_the_global_modes(modes_by_name, made):
    ran: list[str] = []
    tb = toolbox(modes_by_name, ran)
    view = ToolsView(made)
    advertised = {s["function"]["name"] for s in tb.specs(view)}
    for name in NAMES:
        tb.execute(ToolCall(name), view)
        if name in advertised:
            assert modes_by_name[name] is ToolMode.ADVERTISED
    assert all(modes_by_name[n] is not ToolMode.DISABLED for n in ran)


def test_star_advertised_does_not_enable_a_disabled_tool_nor_advertise_a_silent_one():
    ran: list[str] = []
    tb = toolbox(
        {
            "calc": ToolMode.ADVERTISED,
            "clock": ToolMode.SILENT,
            "web_get": ToolMode.DISABLED,
            "web_post": ToolMode.ADVERTISED,
        },
        ran,
    )
    view = tb.view([ToolsScope({"*": "advertised"})])
    assert view.to_dict() == tb.view().to_dict()
    assert [s["function"]["name"] for s in tb.specs(view)] == ["calc", "web_post"]
    r = tb.execute(ToolCall("web_get", id="1"), view)
    assert r.is_error and r.content.startswith("Tool 'web_get' is disabled here.")
    assert "Available tools: calc, web_post." in r.content
    assert not tb.execute(ToolCall("clock"), view).is_error  # silent tools still run
    assert ran == ["clock"]
    # Widening is the operator's: a global mode change, not a layer.
    tb.set_mode("web_get", "advertised")
    assert not tb.execute(ToolCall("web_get"), tb.view([ToolsScope({"*": "advertised"})])).is_error


def test_no_layer_skips_an_approval():
    tb = Toolbox()
    ran: list[str] = []
    tb.register(lambda: ran.append("wipe") or "wiped", name="wipe", risk="high")
    asked: list[str] = []

    def approver(request):
        asked.append(request.call.name)
        return "no"

    view = tb.view([ToolsScope({"*": "advertised", "wipe": "advertised"})])
    r = tb.execute(ToolCall("wipe"), view, approval=approver)
    assert r.is_error and "declined" in r.content and asked == ["wipe"] and ran == []
    r = tb.execute(ToolCall("wipe"), view)  # nobody to ask: not run
    assert r.is_error and "needs the user's approval" in r.content and ran == []
