# SPDX-License-Identifier: MIT
"""Whatever a model sends, execute/aexecute return a ToolResult and never raise."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_toolbox import Toolbox, ToolBudget, ToolCall, ToolResult, ToolsScope

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _box() -> Toolbox:
    tb = Toolbox(builtins=True, default_timeout_s=2.0, max_output_chars=200)

    @tb.register
    def typed(
        n: int, names: list[str], flag: bool = False, extra: dict[str, float] | None = None
    ) -> str:
        return f"{n}{names}{flag}{extra}"

    tb.register_external(
        {"name": "ext", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
        lambda call: call.arguments,
    )
    return tb


TB = _box()
VIEW = TB.view([ToolsScope({"current_time": "disabled", "ext": "silent"})])
names = st.sampled_from([*TB.names(), "ghost", ""]) | st.text(max_size=8)
arguments = st.dictionaries(
    st.sampled_from(["n", "names", "flag", "extra", "q", "expression", "timezone", "name", "zzz"]),
    json_values,
    max_size=4,
)


@settings(max_examples=100, deadline=None)
@given(names, arguments)
def test_execute_never_raises(name, args):
    budget = ToolBudget(max_calls=3).start()
    result = TB.execute(ToolCall(name, args, id="x"), VIEW, budget=budget)
    assert isinstance(result, ToolResult)
    assert result.call_id == "x" and result.name == name
    assert len(result.content) <= 200 + 40  # the cap plus its marker
    assert "internal error" not in result.content  # every refusal is an explained one


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(names, arguments), max_size=4))
def test_aexecute_many_never_raises(calls):
    async def run():
        return await TB.aexecute_many([ToolCall(n, a) for n, a in calls], VIEW)

    results = asyncio.run(run())
    assert len(results) == len(calls)
    assert all(isinstance(r, ToolResult) for r in results)
