# SPDX-License-Identifier: MIT
"""Whatever a model sends and whatever a tool raises, execute/aexecute return a ToolResult."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_toolbox import Toolbox, ToolBudget, ToolCall, ToolResult, ToolsScope


def nested(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
) | st.integers(0, 1_500).map(nested)  # up to far past the recursion limit

# What tools raise: everything becomes a result (a worker thread: Ctrl+C is the tool's).
RAISES = {
    "exit": lambda: SystemExit(2),
    "close": GeneratorExit,
    "cancel": asyncio.CancelledError,
    "interrupt": KeyboardInterrupt,
    "error": ValueError,
}


def _box() -> Toolbox:
    tb = Toolbox(builtins=True, default_timeout_s=2.0, max_output_chars=200)

    @tb.register
    def typed(
        n: int, names: list[str], flag: bool = False, extra: dict[str, float] | None = None
    ) -> str:
        return f"{n}{names}{flag}{extra}"

    @tb.register
    def fails(kind: str) -> str:
        raise RAISES.get(kind, RuntimeError)()

    @tb.register
    async def afails(kind: str) -> str:
        raise RAISES.get(kind, RuntimeError)()

    properties = {
        "q": {"type": "string", "pattern": "^(a|a)*$"},
        "names": {"type": "array", "uniqueItems": True},
    }
    tb.register_external(
        {"name": "ext", "parameters": {"type": "object", "properties": properties}},
        lambda call: call.arguments,
    )
    return tb


TB = _box()
VIEW = TB.view([ToolsScope({"current_time": "disabled", "ext": "silent"})])
names = st.sampled_from([*TB.names(), "ghost", ""]) | st.text(max_size=8)
keys = ["n", "names", "flag", "extra", "q", "expression", "timezone", "name", "kind", "zzz"]
arguments = st.dictionaries(
    st.sampled_from(keys), json_values | st.sampled_from([*RAISES, "a" * 12 + "!"]), max_size=4
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


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["fails", "afails"]), st.sampled_from([*RAISES, "other"]), st.booleans())
def test_whatever_a_tool_raises_is_a_result(name, kind, use_async):
    call = ToolCall(name, {"kind": kind}, id="r")
    result = asyncio.run(TB.aexecute(call, VIEW)) if use_async else TB.execute(call, VIEW)
    assert result.is_error and result.call_id == "r"
    assert "internal error" not in result.content


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["typed", "ext", "calculator"]),
    st.sampled_from(["n", "names", "q", "expression"]),
    st.integers(0, 1_500),
)
def test_deep_arguments_get_an_explained_refusal(name, key, levels):
    result = TB.execute(ToolCall(name, {key: nested(levels)}), VIEW, budget=ToolBudget().start())
    assert isinstance(result, ToolResult)
    assert "internal error" not in result.content
    if levels >= 100:
        assert result.is_error and "nested more than" in result.content
