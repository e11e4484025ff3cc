# SPDX-License-Identifier: MIT
"""Per-turn budgets: max calls, max rounds, repeated identical calls."""

from __future__ import annotations

import asyncio

import pytest

from mp13_toolbox import Toolbox, ToolBudget, ToolCall, plural


@pytest.fixture
def tb():
    box = Toolbox()
    box.register(lambda x: x * 2, name="double", description="")
    return box


def test_max_calls_counts_every_call(tb):
    budget = ToolBudget(max_calls=2).start()
    assert tb.execute(ToolCall("ghost"), budget=budget).is_error  # refused calls count too
    assert not tb.execute(ToolCall("double", {"x": 1}), budget=budget).is_error
    r = tb.execute(ToolCall("double", {"x": 2}), budget=budget)
    assert r.is_error and "call limit reached (2 calls" in r.content
    assert budget.calls == 3 and budget.exhausted


def test_limits_of_one_read_in_the_singular(tb):
    calls = ToolBudget(max_calls=1).start()
    tb.execute(ToolCall("double", {"x": 1}), budget=calls)
    r = tb.execute(ToolCall("double", {"x": 2}), budget=calls)
    assert "Tool call limit reached (1 call this turn)" in r.content
    rounds = ToolBudget(max_rounds=1).start()
    rounds.start_round()
    tb.execute(ToolCall("double", {"x": 1}), budget=rounds)
    rounds.start_round()
    r = tb.execute(ToolCall("double", {"x": 2}), budget=rounds)
    assert "Tool round limit reached (1 round this turn)" in r.content


def test_plural_names_the_count_and_the_noun_in_its_number():
    assert [plural(n, "call") for n in (0, 1, 2)] == ["0 calls", "1 call", "2 calls"]
    assert plural(1, "child", "children") == "1 child"
    assert plural(3, "child", "children") == "3 children"


def test_max_rounds(tb):
    budget = ToolBudget(max_rounds=2).start()
    assert budget.start_round()
    assert not tb.execute(ToolCall("double", {"x": 1}), budget=budget).is_error
    assert budget.start_round()
    assert not tb.execute(ToolCall("double", {"x": 2}), budget=budget).is_error
    assert not budget.start_round()
    r = tb.execute(ToolCall("double", {"x": 3}), budget=budget)
    assert r.is_error and "round limit reached" in r.content
    assert budget.rounds == 3 and budget.exhausted


def test_a_call_before_any_round_opens_round_one(tb):
    budget = ToolBudget(max_rounds=1).start()
    tb.execute(ToolCall("double", {"x": 1}), budget=budget)
    assert budget.rounds == 1
    assert not budget.start_round()


def test_the_same_call_repeated_quotes_the_earlier_result(tb):
    budget = ToolBudget().start()
    first = tb.execute(ToolCall("double", {"x": 21}), budget=budget)
    again = tb.execute(ToolCall("double", {"x": 21}, id="b"), budget=budget)
    assert first.content == "42"
    assert again.is_error and "same arguments" in again.content
    assert again.content.endswith("Its result was:\n42")
    assert not tb.execute(ToolCall("double", {"x": 22}), budget=budget).is_error
    # argument order does not make a call different
    b2 = ToolBudget().start()
    tb.register_external(
        {"name": "pair", "parameters": {"type": "object"}}, lambda c: "ok", replace=True
    )
    tb.execute(ToolCall("pair", {"a": 1, "b": 2}), budget=b2)
    assert tb.execute(ToolCall("pair", {"b": 2, "a": 1}), budget=b2).is_error


def test_a_repeat_is_judged_by_json_equality_as_uniqueitems_is(tb):
    # One canonical JSON serves both: 1 and 1.0 are the same argument, True and 1 are not.
    budget = ToolBudget().start()
    tb.execute(ToolCall("double", {"x": 1}), budget=budget)
    assert tb.execute(ToolCall("double", {"x": 1.0}), budget=budget).is_error
    assert not tb.execute(ToolCall("double", {"x": True}), budget=budget).is_error


def test_arguments_that_cannot_be_encoded_still_count(tb):
    class BadRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    budget = ToolBudget().start()
    assert budget.admit(ToolCall("double", {"x": BadRepr()})) is None
    assert budget.calls == 1


def test_allowed_repeats_and_fresh_turns(tb):
    budget = ToolBudget(max_repeats=1).start()
    call = ToolCall("double", {"x": 1})
    assert [tb.execute(call, budget=budget).is_error for _ in range(3)] == [False, False, True]
    assert not tb.execute(call, budget=ToolBudget(max_repeats=1).start()).is_error


def test_max_repeats_none_means_no_limit(tb):
    # ToolBudget says "None means no limit" and accepted max_repeats=None, but the
    # first call then raised TypeError ('>' between int and NoneType) from execute.
    budget = ToolBudget(max_repeats=None).start()
    call = ToolCall("double", {"x": 1})
    assert [tb.execute(call, budget=budget).is_error for _ in range(4)] == [False] * 4


def test_parallel_calls_share_one_budget(tb):
    budget = ToolBudget(max_calls=5).start()

    async def run():
        budget.start_round()
        return await tb.aexecute_many(
            [ToolCall("double", {"x": i}) for i in range(8)], budget=budget
        )

    results = asyncio.run(run())
    assert sum(not r.is_error for r in results) == 5
    assert budget.calls == 8


def test_limits_must_be_non_negative():
    with pytest.raises(ValueError, match="max_calls"):
        ToolBudget(max_calls=-1)
