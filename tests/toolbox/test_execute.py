# SPDX-License-Identifier: MIT
"""Executing calls: results, typed arguments, errors, timeouts, caps, modes, externals."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import subprocess
import sys
import threading
import time
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pytest

from mp13_toolbox import (
    TRUNCATION_MARKER,
    ToolboxError,
    ToolBudget,
    ToolCall,
    ToolContext,
    ToolKind,
    ToolMode,
    ToolRegistrationError,
    ToolResult,
    ToolSettingError,
    ToolSnapshotError,
    ToolsScope,
    UnknownToolError,
)
from mp13_toolbox import Toolbox as _Toolbox


class Unit(enum.Enum):
    C = "c"
    F = "f"


@attrs.frozen
class Reading:
    value: float
    unit: Unit = Unit.C


def Toolbox(**kw):
    kw.setdefault("default_timeout_s", 5.0)
    return _Toolbox(**kw)


@pytest.fixture
def tb():
    box = Toolbox()

    @box.register
    def add(a: int, b: int = 1) -> int:
        """Add two integers."""
        return a + b

    @box.register
    def convert(r: Reading, to: Unit) -> Reading:
        """Convert a temperature reading."""
        assert isinstance(r, Reading) and isinstance(to, Unit)
        if r.unit is to:
            return r
        v = r.value * 9 / 5 + 32 if to is Unit.F else (r.value - 32) * 5 / 9
        return Reading(v, to)

    @box.register(mode="silent")
    def secret() -> str:
        """A hidden helper."""
        return "psst"

    @box.register
    def boom(msg: str) -> str:
        raise RuntimeError(msg)

    return box


def test_result_text_is_str_as_is_and_json_otherwise(tb):
    r = tb.execute(ToolCall("add", {"a": 2}, id="c1"))
    assert r == ToolResult(name="add", content="3", call_id="c1", duration_s=r.duration_s)
    r = tb.execute(ToolCall("convert", {"r": {"value": 100}, "to": "f"}))
    assert not r.is_error and r.content == '{"value": 212.0, "unit": "f"}'
    assert tb.execute(ToolCall("secret")).content == "psst"


def test_nan_and_infinities_reach_the_model_as_strict_json():
    box = Toolbox()

    @box.register
    def stats() -> dict[str, Any]:
        return {"mean": float("nan"), "max": float("inf"), "min": [float("-inf"), 1.5]}

    r = box.execute(ToolCall("stats"))
    assert not r.is_error
    assert r.content == '{"mean": "NaN", "max": "Infinity", "min": ["-Infinity", 1.5]}'
    assert json.loads(r.content, parse_constant=pytest.fail) == {
        "mean": "NaN",
        "max": "Infinity",
        "min": ["-Infinity", 1.5],
    }


def test_exceptions_become_error_results(tb):
    r = tb.execute(ToolCall("boom", {"msg": "kaput"}, id="x"))
    assert r.is_error and r.call_id == "x"
    assert r.content == "Tool 'boom' failed: RuntimeError: kaput"


def test_bad_arguments_are_reported_not_run(tb):
    r = tb.execute(ToolCall("add", {"a": "two"}))
    assert r.is_error
    assert "Invalid arguments for tool 'add'" in r.content
    assert "argument 'a': expected integer" in r.content
    r = tb.execute(ToolCall("convert", {"r": {"value": 1}, "to": "kelvin"}))
    assert r.is_error and '"kelvin" is not one of: "c", "f"' in r.content


def test_modes_decide_specs_and_execution(tb):
    assert repr(tb) == "Toolbox(tools=['add', 'convert', 'secret', 'boom'])"  # all, any mode
    view = tb.view([ToolsScope({"boom": "disabled"})])
    names = [s["function"]["name"] for s in tb.specs(view)]
    assert names == ["add", "convert"]  # silent and disabled tools are not advertised
    assert not tb.execute(ToolCall("secret"), view).is_error  # silent still runs
    r = tb.execute(ToolCall("boom", {"msg": "x"}), view)
    assert r.is_error and "disabled" in r.content
    assert "Available tools: add, convert." in r.content  # silent tools stay hidden
    r = tb.execute(ToolCall("nope"), view)
    assert r.is_error and r.content.startswith("Unknown tool 'nope'.")


def test_unknown_tool_error_does_not_say_none_when_silent_tools_run():
    tb = _Toolbox()
    tb.register(lambda: "12:00", name="clock", mode="silent")
    r = tb.execute(ToolCall("nope"))
    assert r.is_error and r.content.startswith("Unknown tool 'nope'.")
    assert "Available tools: none" not in r.content
    assert "No tools are advertised here" in r.content
    assert "clock" not in r.content  # a silent tool stays unnamed
    assert not tb.execute(ToolCall("clock")).is_error  # and still runs
    empty = _Toolbox().execute(ToolCall("nope"))
    assert "No tools are available here" in empty.content


def test_view_taken_before_a_registration_does_not_know_the_new_tool(tb):
    view = tb.view()
    tb.register(lambda: "new", name="late")
    assert tb.execute(ToolCall("late"), view).is_error
    assert tb.execute(ToolCall("late")).content == "new"


def test_output_is_capped_with_a_visible_marker():
    box = Toolbox(max_output_chars=10)
    box.register(lambda n: "x" * n, name="spam", description="")
    r = box.execute(ToolCall("spam", {"n": 25}))
    assert r.truncated and not r.is_error
    assert r.content == "x" * 10 + TRUNCATION_MARKER.format(n=15)
    assert not box.execute(ToolCall("spam", {"n": 10})).truncated


def test_a_returned_set_reaches_the_model_as_a_sorted_array():
    # It arrived as the string "{'b', 'a'}" (Python's repr, in an order that changed
    # between processes): JSON has no sets.
    box = Toolbox()
    box.register(lambda: {"tags": {"b", "a"}, "ids": frozenset({2, 1})}, name="tags")
    box.register(lambda: {1, "a"}, name="mixed")
    assert box.execute(ToolCall("tags")).content == '{"tags": ["a", "b"], "ids": [1, 2]}'
    assert box.execute(ToolCall("mixed")).content == '["a", 1]'  # kinds mixed: by repr


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"max_output_chars": "x"}, "max_output_chars must be a whole number > 0 or None"),
        ({"max_output_chars": 0}, "max_output_chars must be a whole number > 0 or None"),
        ({"default_timeout_s": "30"}, "default_timeout_s must be a number of seconds > 0"),
    ],
)
def test_toolbox_limits_are_checked_when_set_not_when_a_tool_runs(settings, problem):
    # A string cap made every execute raise a bare TypeError from inside the toolbox.
    with pytest.raises(ToolSettingError, match=problem):
        _Toolbox(**settings)
    box = Toolbox(builtins=["calculator"])
    with pytest.raises(ToolSettingError, match=problem):
        for name, value in settings.items():
            setattr(box, name, value)
    assert box.execute(ToolCall("calculator", {"expression": "1+1"})).content == "2"


def test_sync_timeout_abandons_the_thread_and_returns_an_error():
    box = Toolbox()
    release = threading.Event()

    @box.register(timeout_s=0.1)
    def stuck() -> str:
        release.wait(5)
        return "late"

    try:
        for run in (box.execute, lambda call: asyncio.run(box.aexecute(call))):
            t0 = time.perf_counter()
            r = run(ToolCall("stuck"))
            assert time.perf_counter() - t0 < 1.0
            assert r.is_error and "timed out after 0.1 s" in r.content
            # Its thread runs on: the model (and whoever reads the session) is told so.
            assert "could not be stopped and may still finish its work" in r.content
    finally:
        release.set()


def test_set_timeout_changes_a_registered_tools_limit():
    box = Toolbox(default_timeout_s=None)
    release = threading.Event()

    @box.register
    def slow() -> str:
        release.wait(5)
        return "done"

    box.set_timeout("slow", 0.1)
    assert box.get("slow").timeout_s == 0.1
    r = box.execute(ToolCall("slow"))
    assert r.is_error and "timed out after 0.1 s" in r.content
    box.set_timeout("slow", None)  # back to the toolbox default (none here)
    assert box.get("slow").timeout_s is None
    release.set()
    assert box.execute(ToolCall("slow")).content == "done"
    with pytest.raises(ToolRegistrationError, match="timeout_s"):
        box.set_timeout("slow", -1)
    with pytest.raises(UnknownToolError):
        box.set_timeout("ghost", 1.0)


def test_async_timeout_cancels_the_coroutine(monkeypatch):
    # A loaded machine may take more than the default grace to run the cancellation.
    monkeypatch.setattr("mp13_toolbox._execute.CANCEL_GRACE_S", 5.0)
    box = Toolbox()
    cancelled = []

    @box.register(timeout_s=0.1)
    async def sleepy() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    r = asyncio.run(box.aexecute(ToolCall("sleepy")))
    assert r.is_error and "timed out" in r.content and cancelled == [True]
    assert "it has stopped and gave no result in time" in r.content
    r = box.execute(ToolCall("sleepy"))  # sync twin: runs on a private loop
    assert r.is_error and "timed out" in r.content
    assert "it has stopped and gave no result in time" in r.content


def test_an_async_tool_that_swallows_its_cancellation_is_said_to_run_on():
    box = Toolbox()
    release = threading.Event()

    @box.register(timeout_s=0.1)
    async def stubborn() -> str:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores being cancelled
                await asyncio.sleep(0.02)
        return "late"

    try:
        for run in (box.execute, lambda call: asyncio.run(box.aexecute(call))):
            t0 = time.perf_counter()
            r = run(ToolCall("stubborn"))
            assert time.perf_counter() - t0 < 2.0  # the timeout plus the cancel grace
            assert r.is_error and "timed out after 0.1 s" in r.content
            assert "could not be stopped" in r.content
    finally:
        release.set()


def test_aexecute_runs_sync_tools_off_the_loop():
    box = Toolbox()

    @box.register
    def slow() -> str:
        time.sleep(0.3)
        return "done"

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        r = await box.aexecute(ToolCall("slow"))
        task.cancel()
        return r, ticks

    r, ticks = asyncio.run(main())
    assert r.content == "done" and ticks >= 5


def test_async_tools_work_from_execute_inside_a_running_loop():
    box = Toolbox()

    @box.register
    async def twice(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def main():
        return box.execute(ToolCall("twice", {"x": 4})), await box.aexecute(
            ToolCall("twice", {"x": 5})
        )

    a, b = asyncio.run(main())
    assert (a.content, b.content) == ("8", "10")


def test_external_tools_get_the_validated_call():
    box = Toolbox()
    seen = []

    def handler(call: ToolCall):
        seen.append(call)
        return {"echo": call.arguments["n"]}

    async def ahandler(call: ToolCall):
        return ToolResult(name="ignored", content="custom", is_error=True)

    spec = {
        "name": "echo",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        },
    }
    info = box.register_external({"type": "function", "function": spec}, handler)
    assert info.kind is ToolKind.EXTERNAL
    box.register_external({**spec, "name": "aecho"}, ahandler, mode=ToolMode.SILENT)
    r = box.execute(ToolCall("echo", {"n": 2.0}, id="7"))
    assert r.content == '{"echo": 2}' and seen[0].arguments == {"n": 2}
    r = asyncio.run(box.aexecute(ToolCall("aecho", {"n": 1}, id="9")))
    assert (r.name, r.content, r.is_error, r.call_id) == ("aecho", "custom", True, "9")
    assert box.execute(ToolCall("echo", {})).is_error
    with pytest.raises(ToolRegistrationError, match="type 'object'"):
        box.register_external({"name": "bad", "parameters": {"type": "string"}}, handler)


def test_context_injection():
    box = Toolbox()

    @box.register
    def whoami(ctx: ToolContext, shout: bool = False) -> str:
        text = f"{ctx.call.name}/{ctx.call.id}/{ctx.toolbox is box}"
        return text.upper() if shout else text

    assert "ctx" not in box.get("whoami").spec.parameters["properties"]
    assert box.execute(ToolCall("whoami", {}, id="q")).content == "whoami/q/True"


def test_registration_rules():
    box = Toolbox()

    def f(x: int) -> int:
        return x

    box.register(f)
    with pytest.raises(ToolRegistrationError, match="replace=True"):
        box.register(f)
    box.register(f, description="new text", replace=True, risk="high")
    info = box.get("f")
    assert (info.description, info.risk.value) == ("new text", "high")
    assert box.register(f, name="g") is f  # decorator-friendly: returns the function
    assert box.names() == ["f", "g"]
    box.unregister("g")
    with pytest.raises(UnknownToolError, match="known tools: f"):
        box.get("g")
    with pytest.raises(ToolRegistrationError, match="timeout_s"):
        box.register(f, name="h", timeout_s=0)
    assert box.set_mode("*", "silent") == ["f"]
    assert box.specs() == []


def test_set_mode_on_a_pattern_that_matches_nothing_says_pattern(tb):
    # It used to say "no tool named 'web_*'", as if the pattern were read as a name.
    with pytest.raises(UnknownToolError, match=r"no tool matches the pattern 'web_\*'"):
        tb.set_mode("web_*", "silent")
    with pytest.raises(UnknownToolError, match=r"no tool named 'web'"):
        tb.set_mode("web", "silent")
    assert tb.set_mode("ad?", "silent") == ["add"]


def test_misuse_of_the_budget_argument_raises_clearly(tb):
    with pytest.raises(ToolboxError, match=r"ToolBudget\(...\).start\(\)"):
        tb.execute(ToolCall("add", {"a": 1}), budget=ToolBudget(max_calls=1))


@pytest.mark.parametrize(
    ("call", "view", "match"),
    [
        ("add", None, r"call must be a ToolCall, got str; pass ToolCall\(name="),
        ({"name": "add", "arguments": {}}, None, "call must be a ToolCall, got dict"),
        (ToolCall("add", {"a": 1}), ["calc"], r"view must be a ToolsView or None, got list"),
    ],
)
def test_a_call_or_view_of_the_wrong_type_raises_clearly_sync_and_async(tb, call, view, match):
    """The caller's misuse is a typed error naming the fix, not an 'internal error' result."""
    with pytest.raises(ToolboxError, match=match):
        tb.execute(call, view)
    with pytest.raises(ToolboxError, match=match):
        asyncio.run(tb.aexecute(call, view))
    with pytest.raises(ToolboxError, match=match):
        asyncio.run(tb.aexecute_many([ToolCall("add", {"a": 1, "b": 2}), call], view))


@pytest.mark.parametrize("approval", [5, "yes"])
def test_an_approver_that_is_not_a_function_raises_sync_and_async(tb, approval):
    # It became the model's problem: "Approving the call failed (TypeError ...)".
    tb.set_approval("add", "ask")
    call = ToolCall("add", {"a": 1, "b": 2})
    match = r"^approval must be a function \(request -> answer\) or None, got "
    with pytest.raises(ToolboxError, match=match):
        tb.execute(call, approval=approval)
    with pytest.raises(ToolboxError, match=match):
        asyncio.run(tb.aexecute(call, approval=approval))
    with pytest.raises(ToolboxError, match=match):
        asyncio.run(tb.aexecute_many([call], approval=approval))
    assert tb.execute(call, approval=lambda request: "yes").content == "3"


@pytest.mark.parametrize(
    ("misuse", "error", "match"),
    [
        (lambda tb: tb.view(5), ToolSettingError, "scope layers are ToolsScope values, not int"),
        (lambda tb: tb.view([{"add": "silent"}]), ToolSettingError, "ToolsScope values, not dict"),
        (lambda tb: ToolsScope(["add"]), ToolSettingError, "a mapping .*, not list"),
        (lambda tb: tb.specs(5), ToolboxError, "view must be a ToolsView or None, got int"),
        (lambda tb: tb.tool_specs("add"), ToolboxError, "view must be a ToolsView or None"),
        (lambda tb: ToolBudget(max_calls="3"), ToolSettingError, "max_calls must be a whole"),
        (lambda tb: ToolBudget(max_rounds=1.5), ToolSettingError, "max_rounds must be a whole"),
        (lambda tb: tb.restore({"tools": []}), ToolSnapshotError, r"ToolboxSnapshot.from_dict"),
        (lambda tb: ToolCall(5, {}), ToolboxError, "ToolCall.name .* not int"),
        (lambda tb: ToolCall("add", "a=1"), ToolboxError, "ToolCall.arguments .* not str"),
        (lambda tb: tb.set_timeout("add", "5"), ToolRegistrationError, "timeout_s must be > 0"),
        (lambda tb: tb.add_builtins(3), ToolboxError, "add_builtins takes builtin names, not 3"),
        (lambda tb: tb.get(["add"]), UnknownToolError, r"no tool named \['add'\]"),
        (lambda tb: tb.unregister(["add"]), UnknownToolError, r"no tool named \['add'\]"),
        (lambda tb: tb.set_mode(["add"], "silent"), ToolSettingError, "a tool name or pattern"),
    ],
)
def test_wrong_types_given_to_the_toolbox_are_typed_errors(tb, misuse, error, match):
    with pytest.raises(error, match=match):
        misuse(tb)


def test_one_scope_or_one_builtin_name_is_taken_as_one(tb):
    """A single value where a list is expected is one item, not split into characters."""
    one = ToolsScope({"add": "silent"})
    assert tb.view(one) == tb.view([one])
    assert tb.view(one).mode("add") is ToolMode.SILENT
    assert tb.add_builtins("calculator") == ["calculator"]
    assert "calculator" in tb


def test_a_round_with_one_misused_call_runs_none_of_them(tb):
    ran: list[int] = []
    tb.register(lambda: ran.append(1) or "ok", name="mark")
    with pytest.raises(ToolboxError, match="call must be a ToolCall"):
        asyncio.run(tb.aexecute_many([ToolCall("mark", {}), "mark"]))
    assert ran == []
    with pytest.raises(ToolboxError, match=r"^calls\[1\]: call must be a ToolCall, got str"):
        asyncio.run(tb.aexecute_many([ToolCall("mark", {}), "mark"]))  # which one is wrong


def test_threads_and_tasks_share_one_toolbox(tb):
    results: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        r = tb.execute(ToolCall("add", {"a": i, "b": i}))
        with lock:
            results.append(r.content)
        tb.register(lambda: i, name=f"t{i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(int, results)) == [2 * i for i in range(16)]
    assert len(tb) == 4 + 16

    async def many():
        return await tb.aexecute_many([ToolCall("add", {"a": i}) for i in range(20)])

    assert [r.content for r in asyncio.run(many())] == [str(i + 1) for i in range(20)]


@attrs.define
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Shape:
    corners: list[Point]
    name: str = "shape"


class Person(TypedDict):
    name: str
    age: int


def test_typed_arguments_are_built_from_json():
    box = Toolbox()
    seen = {}

    @box.register
    def describe(shape: Shape, size: tuple[int, int], tags: frozenset[str], who: Person) -> str:
        seen.update(shape=shape, size=size, tags=tags, who=who)
        return "ok"

    args = {
        "shape": {"corners": [{"x": 1}, {"x": 2, "y": 3.5}]},
        "size": [3, 4],
        "tags": ["a", "b"],
        "who": {"name": "Ada", "age": 36},
    }
    assert box.execute(ToolCall("describe", args)).content == "ok"
    assert seen["shape"] == Shape([Point(1, 0.0), Point(2, 3.5)])
    assert seen["size"] == (3, 4) and seen["tags"] == frozenset({"a", "b"})
    assert seen["who"] == {"name": "Ada", "age": 36}
    r = box.execute(ToolCall("describe", {**args, "tags": ["a", "a"]}))
    assert r.is_error and "unique" in r.content


def test_specs_are_copies(tb):
    tb.specs()[0]["function"]["parameters"]["properties"].clear()
    assert tb.specs()[0]["function"]["parameters"]["properties"]


def test_union_arguments_pick_the_member_that_fits():
    box = Toolbox()

    @box.register
    def pick(v: int | str, opt: Unit | Reading | None = None) -> str:
        return f"{type(v).__name__}:{type(opt).__name__}"

    assert box.execute(ToolCall("pick", {"v": 2.0})).content == "int:NoneType"
    assert box.execute(ToolCall("pick", {"v": "2", "opt": "c"})).content == "str:Unit"
    assert box.execute(ToolCall("pick", {"v": 1, "opt": {"value": 3}})).content == "int:Reading"


@dataclasses.dataclass
class Span:
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError("end must not come before start")


@attrs.define
class Count:
    n: int = attrs.field(validator=attrs.validators.ge(0))


def test_union_members_of_every_kind_arrive_typed():
    box = Toolbox()

    @box.register
    def pick(
        when: Literal["now", "later"] | int,
        size: Annotated[int, "pixels"] | str,
        pair: tuple[int, int] | str,
        extra: Any | None = None,
        count: Count | int = 0,
    ) -> str:
        return repr((when, size, pair, extra, count))

    args = {"when": "now", "size": 3, "pair": [1, 2], "extra": {"k": 1}, "count": 5}
    assert box.execute(ToolCall("pick", args)).content == "('now', 3, (1, 2), {'k': 1}, 5)"
    args = {"when": 4, "size": "big", "pair": "x", "count": {"n": 2}}
    assert box.execute(ToolCall("pick", args)).content == "(4, 'big', 'x', None, Count(n=2))"


def test_a_class_that_refuses_an_argument_tells_the_model_why():
    # The value fits the schema, but the class's own check refuses it: the model is
    # told which argument and the class's reason, and the tool is not run.
    box = Toolbox()
    ran = []

    @box.register
    def measure(span: Span, count: Count | None = None) -> str:
        ran.append(span)
        return "ok"

    r = box.execute(ToolCall("measure", {"span": {"start": 3, "end": 1}}))
    assert r.is_error and r.content == (
        "Invalid arguments for tool 'measure': invalid value (end must not come before "
        "start) @ span. Fix the arguments and call it again."
    )
    r = box.execute(ToolCall("measure", {"span": {"start": 1, "end": 3}, "count": {"n": -1}}))
    assert r.is_error and "invalid value ('n' must be >= 0: -1) @ count" in r.content
    assert ran == []
    assert box.execute(ToolCall("measure", {"span": {"start": 1, "end": 3}})).content == "ok"


def test_a_tool_result_whose_content_is_not_text_is_encoded():
    box = Toolbox()

    @box.register
    def raw() -> ToolResult:
        return ToolResult(name="raw", content={"n": 5}, is_error=True)  # type: ignore[arg-type]

    for r in (box.execute(ToolCall("raw")), asyncio.run(box.aexecute(ToolCall("raw")))):
        assert r.content == '{"n": 5}' and r.is_error


def test_a_bug_inside_the_toolbox_is_an_error_result_not_a_crash(tb, monkeypatch):
    def broken(*args: object) -> None:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr("mp13_toolbox._pipeline.finish", broken)
    expected = (
        "Tool 'add' could not be run because of an internal error (RuntimeError('a bug of ours'))."
    )
    call = ToolCall("add", {"a": 1}, id="c1")
    for r in (tb.execute(call), asyncio.run(tb.aexecute(call))):
        assert r.is_error and r.call_id == "c1" and r.content == expected


def test_a_sync_tool_that_returns_a_coroutine_gets_it_run():
    box = Toolbox(default_timeout_s=None)  # no timeout: a sync tool runs inline

    async def later(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    @box.register
    def deferred(n: int) -> Any:
        return later(n)

    assert box.execute(ToolCall("deferred", {"n": 21})).content == "42"


def test_a_timed_out_sync_tool_never_starts_the_coroutine_it_returns():
    box = Toolbox()
    started = []
    release, returned = threading.Event(), threading.Event()

    async def work() -> str:
        started.append(True)
        return "late"

    @box.register(timeout_s=0.05)
    def slow() -> Any:
        release.wait(10)  # times out here, before its coroutine exists
        coro = work()
        returned.set()
        return coro

    r = box.execute(ToolCall("slow"))
    assert r.is_error and "timed out after 0.05 s" in r.content
    release.set()
    assert returned.wait(5)
    time.sleep(0.2)  # the abandoned thread hands the coroutine to its own loop
    assert started == []


def test_an_abandoned_tool_thread_never_blocks_process_exit():
    code = (
        "import asyncio, time\n"
        "from mp13_toolbox import Toolbox, ToolCall\n"
        "tb = Toolbox()\n"
        "tb.register(lambda: time.sleep(60), name='hang', description='', timeout_s=0.1)\n"
        "assert tb.execute(ToolCall('hang')).is_error\n"
        "assert asyncio.run(tb.aexecute(ToolCall('hang'))).is_error\n"
        "print('exited')\n"
    )
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "exited"
    assert time.perf_counter() - t0 < 20  # not the 60 s the tool sleeps


@pytest.mark.parametrize("calls", [ToolCall("calculator", {"expression": "1"}), 5])
def test_aexecute_many_given_one_call_says_to_wrap_it(calls):
    box = Toolbox(builtins=["calculator"])
    with pytest.raises(ToolboxError, match=r"takes a list of ToolCalls, not .*wrap one call"):
        asyncio.run(box.aexecute_many(calls))


def _pairs(n: int) -> Any:
    return ((i, i) for i in range(n))


async def _agen() -> Any:
    yield 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: _pairs(2),
        lambda: map(str, [1]),
        lambda: iter([1]),
        lambda: _agen(),
        lambda: ToolResult(name="lister", content=_pairs(1)),  # type: ignore[arg-type]
    ],
)
def test_a_returned_iterator_is_an_error_that_says_to_return_a_list(make):
    # Registration refuses generator functions; a plain function can still return one.
    box = Toolbox()
    box.register(make, name="lister", description="")
    for r in (box.execute(ToolCall("lister")), asyncio.run(box.aexecute(ToolCall("lister")))):
        assert r.is_error
        assert "returned a" in r.content and "(an iterator) instead of a result" in r.content
        assert "return a list" in r.content and "object at 0x" not in r.content
