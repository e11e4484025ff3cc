# SPDX-License-Identifier: MIT
"""``ApprovalState``: a toolbox's approval decisions and the questions it asks.

Concept
    What ``Toolbox`` decides about a call that passed lookup and validation: the
    ``always``/``never`` answers remembered per tool, the policy of each risk for tools
    without their own, and the asking itself (``approve`` for ``execute``, ``aapprove``
    for ``aexecute``). The rules those follow are :mod:`~mp13_toolbox._approval`'s.

Invariants
    * Its state sits behind the toolbox registry's lock (one lock, so a tool removed
      while its call was being asked about never leaves its answer to a successor).
    * One approval question at a time (per thread group / per event loop), so parallel
      calls of one tool do not ask twice when the first answer is ``always``.
    * Asking never raises because of the approver: what it raises, or an answer that is
      none, becomes the error result of the call; only the cancellation of the caller's
      task propagates.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from mp13_toolbox import _execute as ex
from mp13_toolbox import _pipeline as pl
from mp13_toolbox._approval import (
    DEFAULT_APPROVALS,
    Approval,
    ApprovalAnswer,
    Risk,
    as_approval,
    as_risk,
    decide,
    is_answer,
)
from mp13_toolbox._errors import ToolSettingError
from mp13_toolbox._registry import RegisteredTool, ToolRegistry
from mp13_toolbox._types import ToolResult

if TYPE_CHECKING:  # annotations only
    from mp13_toolbox._approval import Approver


class ApprovalState:
    """Remembered answers, per-risk defaults and the ask locks of one toolbox."""

    def __init__(
        self, registry: ToolRegistry, defaults: Mapping[Risk | str, Approval | str] | None
    ) -> None:
        self._registry = registry
        self.remembered: dict[str, ApprovalAnswer] = {}
        chosen = dict(DEFAULT_APPROVALS)
        for risk, policy in (defaults or {}).items():
            chosen[as_risk(risk)] = as_approval(policy) or DEFAULT_APPROVALS[as_risk(risk)]
        self.defaults = chosen
        # One approval question at a time (per thread group / per event loop), so
        # parallel calls of one tool do not ask twice when the first answer is "always".
        self._ask_lock = threading.RLock()
        self._ask_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # settings -----------------------------------------------------------------------------

    def set_default(self, risk: Risk | str, policy: Approval | str) -> None:
        """The policy for tools of ``risk`` that have none of their own."""
        policy_ = as_approval(policy)
        if policy_ is None:
            raise ToolSettingError("a risk default must be allow, deny or ask, not None")
        with self._registry.lock:
            self.defaults = {**self.defaults, as_risk(risk): policy_}

    def remember(self, name: str, answer: ApprovalAnswer | str | None) -> None:
        """Store an ``always``/``never`` answer for a tool (``None`` forgets it)."""
        with self._registry.lock:
            self._registry.require(name)
            if answer is None:
                self.remembered.pop(name, None)
                return
            if answer not in (ApprovalAnswer.ALWAYS, ApprovalAnswer.NEVER):
                raise ToolSettingError(
                    f"cannot remember {answer!r}: only 'always' and 'never' are remembered; "
                    "use None to forget"
                )
            self.remembered[name] = ApprovalAnswer(answer)

    def restore(
        self, remembered: Mapping[str, ApprovalAnswer], defaults: Mapping[Risk, Approval]
    ) -> None:
        """Take a snapshot's answers (of the tools registered now) and defaults (call holding
        the registry's lock, with the snapshot's tools registered)."""
        self.remembered = {k: v for k, v in remembered.items() if k in self._registry}
        self.defaults = {**DEFAULT_APPROVALS, **defaults}

    # asking -------------------------------------------------------------------------------

    def _policy(self, tool: RegisteredTool) -> Approval:
        with self._registry.lock:
            remembered = self.remembered.get(tool.name)
            defaults = self.defaults
        return decide(remembered, tool.approval, tool.risk, defaults)

    def approve(self, plan: pl.Plan, approver: Approver | None) -> pl.Plan | ToolResult:
        """Sync approval; questions are asked one at a time across threads."""
        policy = self._policy(plan.tool)
        if policy is Approval.ASK and approver is not None:
            with self._ask_lock:
                policy = self._policy(plan.tool)  # an answer given meanwhile may be remembered
                if policy is Approval.ASK:
                    try:
                        answer = approver(pl.approval_request(plan))
                        if inspect.isawaitable(answer):
                            pending = answer
                            answer = ex.call_blocking(lambda: pending, True, None).unwrap()
                    # No task of the caller's awaits here: a CancelledError is the approver's.
                    except (Exception, asyncio.CancelledError) as exc:
                        return pl.approval_failed(plan, exc)
                    return self._answered(plan, answer)
        return pl.without_asking(plan, policy)

    async def aapprove(self, plan: pl.Plan, approver: Approver | None) -> pl.Plan | ToolResult:
        """Async approval; questions are asked one at a time per event loop."""
        policy = self._policy(plan.tool)
        if policy is Approval.ASK and approver is not None:
            async with self._loop_ask_lock():
                policy = self._policy(plan.tool)
                if policy is Approval.ASK:
                    try:
                        answer = approver(pl.approval_request(plan))
                    except Exception as exc:
                        return pl.approval_failed(plan, exc)
                    if inspect.isawaitable(answer):
                        # What it raises, its own CancelledError (a UI whose pending
                        # question was dropped) included, is a value; this task's
                        # cancellation propagates.
                        outcome = await _answer_of(answer)
                        if outcome.error is not None:
                            return pl.approval_failed(plan, outcome.error)
                        answer = outcome.value
                    return self._answered(plan, answer)
        return pl.without_asking(plan, policy)

    def _loop_ask_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._registry.lock:
            lock = self._ask_locks.get(loop)
            if lock is None:
                lock = self._ask_locks[loop] = asyncio.Lock()
            return lock

    def _answered(self, plan: pl.Plan, raw: Any) -> pl.Plan | ToolResult:
        """``plan`` when the approver said yes, else the denial; remembers always/never."""
        answer = ApprovalAnswer.parse(raw)
        if answer in (ApprovalAnswer.ALWAYS, ApprovalAnswer.NEVER):
            with self._registry.lock:
                if plan.tool.name in self._registry:
                    self.remembered[plan.tool.name] = answer
        if answer in (ApprovalAnswer.YES, ApprovalAnswer.ALWAYS):
            return plan
        if not is_answer(raw):
            # Not "the user declined": the approver gave no answer (a callback that
            # forgot to return), and whoever reads the session must see which.
            shown = ex.printable(raw)
            shown = shown if len(shown) <= 60 else shown[:60] + "…"
            return pl.error_result(
                plan.call,
                f"The call of {plan.tool.name!r} was not run: the approver answered "
                f"{shown!r} ({type(raw).__name__}), which is not yes, no, always or never, "
                "so it counts as no.",
            )
        return pl.error_result(
            plan.call, f"The user declined the call of {plan.tool.name!r}; it was not run."
        )


async def _answer_of(awaitable: Awaitable[Any]) -> ex.Outcome:
    """What an async approver's ``awaitable`` gave, as an ``Outcome``.

    It runs as a task of its own, so that what it raises, its own ``CancelledError``
    included, arrives as a value; only the cancellation of the task awaiting it (the
    caller's) raises here, and cancels it too.
    """

    async def outcome() -> ex.Outcome:
        try:
            return ex.Outcome(value=await awaitable)
        except (Exception, asyncio.CancelledError) as exc:
            return ex.Outcome(error=exc)

    task = asyncio.ensure_future(outcome())
    try:
        # Not ``await task``: cancelling this task would cancel that one, whose outcome
        # (the CancelledError as a value) would then be returned and the cancel lost.
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise
