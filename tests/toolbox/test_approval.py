# SPDX-License-Identifier: MIT
"""Approval policy: allow / deny / ask, risk defaults, remembered answers, async approvers."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mp13_toolbox import (
    DEFAULT_APPROVALS,
    Approval,
    ApprovalAnswer,
    ApprovalRequest,
    Risk,
    Toolbox,
    ToolCall,
)


def make():
    tb = Toolbox()
    ran = []

    def low() -> str:
        ran.append("low")
        return "ok"

    def medium() -> str:
        ran.append("medium")
        return "ok"

    def high() -> str:
        ran.append("high")
        return "ok"

    tb.register(low)
    tb.register(medium, risk="medium")
    tb.register(high, risk=Risk.HIGH)
    return tb, ran


def test_risk_defaults_low_allows_others_ask():
    tb, ran = make()
    assert not tb.execute(ToolCall("low")).is_error
    r = tb.execute(ToolCall("medium"))
    assert r.is_error and "needs the user's approval" in r.content
    assert ran == ["low"]


def test_approver_answers_and_remembered_decisions():
    tb, ran = make()
    asked: list[ApprovalRequest] = []

    def approver(req: ApprovalRequest):
        asked.append(req)
        return {"medium": "always", "high": "never"}[req.call.name]

    assert not tb.execute(ToolCall("medium", id="1"), approval=approver).is_error
    r = tb.execute(ToolCall("high"), approval=approver)
    assert r.is_error and "declined" in r.content
    assert [a.call.name for a in asked] == ["medium", "high"]
    assert asked[1].risk is Risk.HIGH
    assert tb.remembered() == {"medium": ApprovalAnswer.ALWAYS, "high": ApprovalAnswer.NEVER}
    # remembered: the approver is not asked again
    assert not tb.execute(ToolCall("medium"), approval=approver).is_error
    assert tb.execute(ToolCall("high"), approval=approver).is_error
    assert len(asked) == 2 and ran == ["medium", "medium"]
    tb.remember("high", None)
    assert "high" not in tb.remembered()


@pytest.mark.parametrize(
    ("answer", "runs"),
    [
        (True, True),
        (False, False),
        ("yes", True),
        ("y", True),
        ("no", False),
        ("maybe", False),
        (None, False),  # an approver that forgot to return: declined, never run
        (1, False),
    ],
)
def test_one_off_answers_are_not_remembered(answer, runs):
    tb, _ = make()
    r = tb.execute(ToolCall("medium"), approval=lambda req: answer)
    assert r.is_error is not runs
    assert tb.remembered() == {}


@pytest.mark.parametrize("answer", [None, "maybe", 1, object()])
def test_an_answer_that_is_none_of_the_answers_is_reported_as_such(answer):
    tb, ran = make()
    for r in (
        tb.execute(ToolCall("medium"), approval=lambda req: answer),
        asyncio.run(tb.aexecute(ToolCall("medium"), approval=lambda req: answer)),
    ):
        assert r.is_error and "declined" not in r.content  # nobody declined
        assert f"({type(answer).__name__}), which is not yes, no, always or never" in r.content
        assert "counts as no" in r.content
    assert ran == []


def test_a_typed_reply_reads_the_same_for_every_approver():
    parse = ApprovalAnswer.parse
    assert [parse(w) for w in ("Y", " yes ", "allow", True)] == [ApprovalAnswer.YES] * 4
    assert [parse(w) for w in ("n", "deny", "", "maybe", None, 1)] == [ApprovalAnswer.NO] * 6
    assert parse("a") is parse("ALWAYS") is ApprovalAnswer.ALWAYS
    assert parse("v") is parse("never") is ApprovalAnswer.NEVER  # ne[v]er
    tb, _ = make()
    assert tb.execute(ToolCall("medium"), approval=lambda req: "v").is_error
    assert tb.remembered() == {"medium": ApprovalAnswer.NEVER}


def test_explicit_policies_beat_risk_defaults_and_deny_beats_always():
    tb, ran = make()
    tb.set_approval("high", "allow")
    tb.set_approval("low", Approval.DENY)
    assert not tb.execute(ToolCall("high")).is_error
    tb.remember("low", "always")
    r = tb.execute(ToolCall("low"), approval=lambda req: True)
    assert r.is_error and "not allowed" in r.content
    tb.set_approval_default("medium", "allow")
    assert not tb.execute(ToolCall("medium")).is_error
    assert ran == ["high", "medium"]
    with pytest.raises(ValueError, match="allow, deny, ask"):
        tb.set_approval("low", "sometimes")


def test_async_approver_from_both_twins_and_approver_errors():
    tb, ran = make()

    async def approver(req):
        await asyncio.sleep(0)
        return ApprovalAnswer.YES

    assert not asyncio.run(tb.aexecute(ToolCall("medium"), approval=approver)).is_error
    assert not tb.execute(ToolCall("medium"), approval=approver).is_error

    def broken(req):
        raise OSError("no terminal")

    async def abroken(req):
        await asyncio.sleep(0)
        raise OSError("no terminal")

    expected = "Approving the call of 'medium' failed (OSError('no terminal')); it was not run."
    for approver_ in (broken, abroken):
        r = tb.execute(ToolCall("medium"), approval=approver_)
        assert r.is_error and r.content == expected
        r = asyncio.run(tb.aexecute(ToolCall("medium"), approval=approver_))
        assert r.is_error and r.content == expected
    assert ran == ["medium", "medium"]


def test_toolbox_level_defaults():
    tb = Toolbox(approval_defaults={"low": "ask"})
    tb.register(lambda: "x", name="f")
    assert tb.execute(ToolCall("f")).is_error
    assert tb.approval_defaults[Risk.HIGH] is Approval.ASK


def test_parallel_calls_ask_once_when_the_answer_is_always():
    tb, ran = make()
    asked = []

    async def approver(req):
        asked.append(req.call.id)
        await asyncio.sleep(0.01)  # let the other calls queue up behind this question
        return "always"

    calls = [ToolCall("medium", id=str(i)) for i in range(5)]
    results = asyncio.run(tb.aexecute_many(calls, approval=approver))
    assert [r.is_error for r in results] == [False] * 5
    assert len(asked) == 1 and ran == ["medium"] * 5

    tb2, _ = make()
    asked.clear()

    def sync_approver(req):
        asked.append(req.call.id)
        time.sleep(0.01)
        return "always"

    threads = [
        threading.Thread(target=tb2.execute, args=(c,), kwargs={"approval": sync_approver})
        for c in calls
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(asked) == 1


def test_default_approvals_are_read_only_and_toolboxes_change_their_own_copy():
    with pytest.raises(TypeError):
        DEFAULT_APPROVALS[Risk.HIGH] = Approval.ALLOW  # type: ignore[index]
    tb = Toolbox(approval_defaults={"medium": "allow"})
    tb.set_approval_default("high", "deny")
    assert tb.approval_defaults[Risk.HIGH] is Approval.DENY
    assert dict(DEFAULT_APPROVALS) == {
        Risk.LOW: Approval.ALLOW,
        Risk.MEDIUM: Approval.ASK,
        Risk.HIGH: Approval.ASK,
    }
    assert Toolbox().approval_defaults == dict(DEFAULT_APPROVALS)


def test_always_for_a_tool_removed_while_asked_is_not_remembered_for_its_successor():
    tb, ran = make()
    asked: list[str] = []

    def approver(req: ApprovalRequest) -> str:
        asked.append(req.call.name)
        if len(asked) == 1:
            tb.unregister("medium")  # e.g. the user removed it from another window
        return "always"

    # The call the user approved runs; the "always" has no tool left to stick to.
    assert tb.execute(ToolCall("medium"), approval=approver).content == "ok"
    assert ran == ["medium"] and tb.remembered() == {}

    def medium() -> str:
        ran.append("new medium")
        return "ok"

    tb.register(medium, risk="medium")
    assert not tb.execute(ToolCall("medium"), approval=approver).is_error
    assert asked == ["medium", "medium"]  # the successor is asked about itself
    assert tb.remembered() == {"medium": ApprovalAnswer.ALWAYS}
    assert ran == ["medium", "new medium"]


def test_an_async_approver_that_raises_its_own_cancelled_error_is_a_result():
    # A UI whose pending question was dropped (its future cancelled) raises
    # CancelledError inside the approver: no one cancelled the caller's task.
    tb, ran = make()

    async def dropped(req: ApprovalRequest) -> str:
        raise asyncio.CancelledError

    for r in (
        tb.execute(ToolCall("medium"), approval=dropped),
        asyncio.run(tb.aexecute(ToolCall("medium"), approval=dropped)),
    ):
        assert r.is_error
        assert (
            r.content == "Approving the call of 'medium' failed (CancelledError()); it was not run."
        )
    assert ran == []


def test_cancelling_the_task_awaiting_an_approver_still_cancels_it():
    tb, ran = make()
    asked, stopped = asyncio.Event(), []

    async def slow(req: ApprovalRequest) -> str:
        asked.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.append(True)
            return "yes"  # swallows it: the caller's cancel must not be lost even so
        return "yes"

    async def main() -> None:
        task = asyncio.create_task(tb.aexecute(ToolCall("medium"), approval=slow))
        await asyncio.wait_for(asyncio.shield(asked.wait()), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the approver's task runs its cancellation

    asyncio.run(main())
    assert stopped == [True] and ran == []
