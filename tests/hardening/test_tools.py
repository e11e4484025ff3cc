# SPDX-License-Identifier: MIT
"""Tool calls the model makes and tools that misbehave: always a result, never a crash.

New cases of the hardening campaign: fuzzed calls (names, argument shapes and values:
NaN, 30-digit ints, NUL, lone surrogates, 100k-character strings, nesting) against
tools that return what real code returns by accident (an int of 5,000 digits, a
structure nested past the recursion limit, objects whose ``__str__`` fails, generators,
10 MB strings), raise every kind of ``BaseException``, block past their timeout, and
external tools whose schemas are malformed (``"required": 5``, ``"properties": []``,
``"anyOf": 5``...). Before, the last two kinds gave "could not be run because of an
internal error" (a tool that ran, or a tool made uncallable by a foreign spec); a
non-dict ``parameters`` raised a raw ``ValueError`` at registration.

The same calls through the turn runner: every call gets exactly one result in the
tree, the session stays verifiable, nothing raises.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_context import ChatContext, Role, Session
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import (
    Toolbox,
    ToolBudget,
    ToolCall,
    ToolRegistrationError,
    ToolResult,
    ToolsScope,
)

CAP = 300


class _NoStr:
    def __str__(self) -> str:
        raise ValueError("no str")

    def __repr__(self) -> str:
        raise ValueError("no repr")


class _StrNotStr:
    def __str__(self):
        return 5


class _NoStrError(Exception):
    def __str__(self) -> str:
        return str(1 / 0)


def _deep(levels: int, make=lambda inner: {"a": inner}):
    return functools.reduce(lambda inner, _: make(inner), range(levels), {})


_recursive: list = []
_recursive.append(_recursive)

RETURNS = {
    "long int": lambda: 10**5000,
    "no str": _NoStr,
    "str not str": _StrNotStr,
    "bytes": lambda: b"\xff\x00",
    "generator": lambda: (i for i in range(3)),
    "recursive list": lambda: _recursive,
    "nan": lambda: float("nan"),
    "odd keys": lambda: {(1, 2): 3, None: 1},
    "set": lambda: {1, 2},
    "10 MB": lambda: "x" * 10_000_000,
    "surrogate": lambda: "caf\udce9",
    "deep dict": lambda: _deep(5000),
    "deep list": lambda: _deep(5000, lambda inner: [inner]),
    "exception as value": lambda: ValueError("as a value"),
}
RAISES = [
    SystemExit,
    SystemExit("exit text"),
    KeyboardInterrupt,
    GeneratorExit,
    asyncio.CancelledError,
    MemoryError,
    RecursionError,
    StopIteration,
    StopAsyncIteration,
    BaseException,
    _NoStrError,
]
#: Schemas that bound validation (a backtracking pattern, uniqueItems) and, from index
#: ``MALFORMED``, schemas whose keywords have values of the wrong type.
HOSTILE_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
    {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
    {"type": "object", "required": 5},
    {"type": "object", "properties": []},
    {"type": "object", "properties": {"a": {"enum": 5}}},
    {"type": "object", "properties": {"a": {"minLength": "3", "maxItems": "x"}}},
    {"type": "object", "properties": {"a": {"prefixItems": {"x": 1}, "items": [1]}}},
    {"type": "object", "properties": {"a": {"anyOf": 5, "oneOf": {"type": "string"}}}},
    {"type": "object", "properties": {"a": {"allOf": 5}}},
    {"type": "object", "required": ["a", 7], "properties": {"a": "string"}},
    {"type": "object", "properties": {"a": {"minimum": "0", "type": ["string", 5, None]}}},
    {"type": "object", "additionalProperties": "no"},
    {"type": "object", "properties": {"a": {"pattern": "((", "format": 5}}},
    {"type": "object", "properties": {"a": {"items": {"items": {"uniqueItems": True}}}}},
]


MALFORMED = 2


def _toolbox() -> Toolbox:
    # The blocking tools below have their own 0.05 s timeouts; the others only need a
    # timeout that a garbage collection in a busy full-suite process does not reach.
    tb = Toolbox(builtins=True, default_timeout_s=5.0, max_output_chars=CAP)

    @tb.register
    def returns(kind: str) -> object:
        """Returns an odd value."""
        return RETURNS[kind]()

    @tb.register
    async def areturns(kind: str) -> object:
        """Returns an odd value, async."""
        return RETURNS[kind]()

    @tb.register
    def raises(i: int) -> str:
        """Raises."""
        raise RAISES[i % len(RAISES)]

    @tb.register
    async def araises(i: int) -> str:
        """Raises, async."""
        raise RAISES[i % len(RAISES)]

    @tb.register(timeout_s=0.05)
    def blocks(s: float) -> str:
        """Blocks past its timeout."""
        time.sleep(min(s, 0.2))
        return "woke"

    @tb.register(timeout_s=0.05)
    async def ablocks(s: float) -> str:
        """Blocks its own event loop past its timeout."""
        time.sleep(min(s, 0.2))
        return "woke"

    for i, schema in enumerate(HOSTILE_SCHEMAS):
        tb.register_external(
            {"name": f"ext{i}", "parameters": schema}, lambda call: sorted(call.arguments)
        )
    return tb


TB = _toolbox()
VIEW = TB.view([ToolsScope({"*": "advertised"})])

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\x00", "\udcff", "a" * 100_000, "a" * 28 + "!", *RETURNS]),
    st.floats(0, 0.2),
)
_values = st.recursive(
    _leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner)
)
_names = st.sampled_from([*TB.names(), "ghost", "", "x" * 1000])
_arguments = st.dictionaries(
    st.sampled_from(["kind", "i", "s", "a", "expression", "timezone", "\ud800", ""]),
    _values,
    max_size=3,
)


def _check(call: ToolCall, result: ToolResult) -> None:
    assert isinstance(result, ToolResult)
    assert result.call_id == call.id and result.name == call.name
    assert len(result.content) <= CAP + 40  # the cap plus its marker
    assert "internal error" not in result.content


def _fuzz_execute(name: str, arguments: dict, use_async: bool) -> None:
    call = ToolCall(name, arguments, id="c")
    budget = ToolBudget(max_calls=3).start()
    if use_async:
        result = asyncio.run(TB.aexecute(call, VIEW, budget=budget))
    else:
        result = TB.execute(call, VIEW, budget=budget)
    _check(call, result)


_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@_FUZZ
@given(_names, _arguments, st.booleans())
def test_fuzzed_calls_always_get_a_readable_result(name, arguments, use_async):
    _fuzz_execute(name, arguments, use_async)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_names, _arguments, st.booleans())
def test_ten_thousand_fuzzed_calls(name, arguments, use_async):
    _fuzz_execute(name, arguments, use_async)


@pytest.mark.parametrize("kind", list(RETURNS))
@pytest.mark.parametrize("name", ["returns", "areturns"])
def test_whatever_a_tool_returns_becomes_text_the_model_can_read(name, kind):
    call = ToolCall(name, {"kind": kind}, id="r")
    for result in (TB.execute(call, VIEW), asyncio.run(TB.aexecute(call, VIEW))):
        _check(call, result)
        assert result.content
        if kind == "generator":  # text of no use to the model: an error saying so
            assert result.is_error and "returned a generator" in result.content
        else:
            assert not result.is_error, result.content  # it ran and returned, however odd


@pytest.mark.parametrize("i", range(len(RAISES)))
@pytest.mark.parametrize("name", ["raises", "araises"])
def test_whatever_a_tool_raises_is_an_error_result(name, i):
    call = ToolCall(name, {"i": i}, id="r")
    for result in (TB.execute(call, VIEW), asyncio.run(TB.aexecute(call, VIEW))):
        _check(call, result)
        assert result.is_error


@pytest.mark.parametrize("i", range(MALFORMED, len(HOSTILE_SCHEMAS)))
def test_a_malformed_schema_never_makes_its_tool_uncallable(i):
    call = ToolCall(f"ext{i}", {"a": "aaaa"}, id="s")
    result = TB.execute(call, VIEW)
    _check(call, result)
    assert not result.is_error and result.content == '["a"]'


@pytest.mark.parametrize("parameters", ["schema", 5, ["a"]])
def test_a_spec_whose_parameters_are_no_schema_is_refused_at_registration(parameters):
    with pytest.raises(ToolRegistrationError):
        Toolbox().register_external({"name": "x", "parameters": parameters}, lambda call: "")


def test_blocking_tools_time_out_without_blocking_the_callers_loop():
    async def run():
        started = time.perf_counter()
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        results = await TB.aexecute_many(
            [ToolCall("ablocks", {"s": 1.0}, id="a"), ToolCall("blocks", {"s": 1.0}, id="b")],
            VIEW,
        )
        ticker.cancel()
        return results, time.perf_counter() - started, ticks

    results, took, ticks = asyncio.run(run())
    assert all(r.is_error and "timed out" in r.content for r in results)
    assert took < 1.5 and ticks >= 3


# ----- the same calls through the turn runner


def _runner_fuzz(seed_calls: list[list[tuple[str, dict]]]) -> int:
    """Each inner list is one reply's calls; returns how many calls were recorded."""
    script = [FakeReply(tool_calls=[ToolCall(n, a) for n, a in calls]) for calls in seed_calls]
    done = FakeReply(text="done")
    engine = FakeEngine(responder=lambda request: script.pop(0) if script else done)
    session = Session.open(":memory:")
    cur = ChatContext(session, engine=engine, toolbox=TB).cursor()
    cur.params.set(max_tool_rounds=len(seed_calls) + 1, max_tool_calls=10_000)
    turn = cur.ask("go")
    assert turn.error is None
    recorded = 0
    path = session.path(cur.node_id)
    for node, after in itertools.pairwise(path):
        if node.turn and node.turn.role is Role.ASSISTANT and node.turn.tool_calls:
            assert after.turn is not None and after.turn.role is Role.TOOL
            ids = [c.id for c in node.turn.tool_calls]
            assert [r.call_id for r in after.turn.tool_results] == ids  # one result each
            assert all("internal error" not in r.content for r in after.turn.tool_results)
            recorded += len(ids)
    assert session.verify().ok
    session.close()
    return recorded


_rounds = st.lists(st.lists(st.tuples(_names, _arguments), min_size=1, max_size=4), max_size=3)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(_rounds)
def test_fuzzed_calls_through_the_runner_each_get_one_result(rounds):
    assert _runner_fuzz(rounds) == sum(len(r) for r in rounds)


@pytest.mark.slow
@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_rounds)
def test_fuzzed_calls_through_the_runner_long_run(rounds):
    assert _runner_fuzz(rounds) == sum(len(r) for r in rounds)
