# SPDX-License-Identifier: MIT
"""The steps of one tool call, shared by ``Toolbox.execute`` and ``aexecute``.

The sync and async twins differ only in how they wait (approver, tool); every
other step lives here: ``prepare`` (lookup in view and registry, budget,
argument validation with its time counted against the tool's timeout, typed
arguments, the run's timeout), then, after approval and the run, ``finish``
(output text, cap, budget record; the error result for whatever the tool
raised or for a timeout). Each returns a ``ToolResult`` instead of raising.

The steps read the toolbox through ``ToolHost``, the narrow protocol this module
owns, so the pipeline sits below the ``Toolbox`` class it serves.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import attrs

from mp13_toolbox import _execute as ex
from mp13_toolbox._approval import Approval, ApprovalRequest
from mp13_toolbox._budget import BudgetTracker
from mp13_toolbox._context import ToolCatalog, ToolContext
from mp13_toolbox._convert import converter, error_text
from mp13_toolbox._errors import ToolboxError
from mp13_toolbox._registry import RegisteredTool, ToolKind
from mp13_toolbox._scopes import ToolsView, narrower
from mp13_toolbox._types import ToolCall, ToolMode, ToolResult, ToolSpec
from mp13_toolbox._validate import DEFAULT_BUDGET_S, validate

# A tool whose validation used (almost) all of its timeout still gets this long to run.
_MIN_RUN_S = 0.01
# Annotations whose validated JSON value is already the Python value.
_PASSTHROUGH = (str, int, bool, Any, inspect.Parameter.empty)


class ToolHost(ToolCatalog, Protocol):
    """What the steps read of a toolbox besides its catalog (``Toolbox`` is one)."""

    @property
    def default_timeout_s(self) -> float | None:
        """The timeout of a tool that sets none (``None``: no timeout)."""
        ...

    def tool_specs(self, view: ToolsView | None = None) -> list[ToolSpec]:
        """The specs ``view`` advertises (named in the error for an unknown tool)."""
        ...


@attrs.frozen
class Plan:
    """A call that passed lookup, budget and validation: ready for approval and run."""

    tool: RegisteredTool
    call: ToolCall
    target: Callable[[], Any]
    timeout: float | None  # the tool's timeout, as configured
    run_timeout: float | None  # what is left of it after validation: the run's limit


def check_view(view: object) -> None:
    """A ``view`` argument that is neither a ``ToolsView`` nor ``None`` (caller misuse)."""
    if view is not None and not isinstance(view, ToolsView):
        raise ToolboxError(
            f"view must be a ToolsView or None, got {type(view).__name__}; "
            "pass toolbox.view(scopes), or None for the toolbox's own modes"
        )


def check_arguments(call: object, view: object, budget: object, approval: object = None) -> None:
    """Misuse by the caller, the one thing ``execute`` raises for."""
    if not isinstance(call, ToolCall):
        raise ToolboxError(
            f"call must be a ToolCall, got {type(call).__name__}; "
            "pass ToolCall(name=..., arguments={...})"
        )
    check_view(view)
    if budget is not None and not isinstance(budget, BudgetTracker):
        raise ToolboxError(
            f"budget must be a per-turn BudgetTracker, got {type(budget).__name__}; "
            "pass ToolBudget(...).start() once per turn"
        )
    if approval is not None and not callable(approval):
        raise ToolboxError(
            f"approval must be a function (request -> answer) or None, got "
            f"{type(approval).__name__}; pass e.g. approval=lambda request: 'yes'"
        )


def prepare(
    host: ToolHost,
    tool: RegisteredTool | None,
    call: ToolCall,
    view: ToolsView,
    budget: BudgetTracker | None,
) -> Plan | ToolResult:
    """``call`` of ``tool`` (``None``: not registered) checked up to approval."""
    mode = view.mode(call.name)
    refusal = None
    if tool is not None and not tool.resolved:
        refusal = f"Tool {call.name!r} is not available in this session (not loaded)."
    elif tool is None or mode is None:
        refusal = f"Unknown tool {call.name!r}."
    elif narrower(mode, tool.mode) is ToolMode.DISABLED:
        # The tool's global mode caps any view, however it was made (see _scopes).
        refusal = f"Tool {call.name!r} is disabled here."
    if refusal is not None:
        if budget is not None:
            budget.admit(call)
        return error_result(call, f"{refusal} {_alternatives(host, view)}")
    assert tool is not None  # no refusal: the tool is registered
    if budget is not None:
        reason = budget.admit(call)
        if reason is not None:
            return error_result(call, reason)
    timeout = tool.timeout_s if tool.timeout_s is not None else host.default_timeout_s
    # Validation counts against the tool's timeout and never takes more than it.
    checking = validation_budget_s(timeout)
    started = time.monotonic()
    args, problems = validate(tool.spec.parameters, call.arguments, budget_s=checking)
    spent = time.monotonic() - started
    if problems:
        return error_result(call, invalid_arguments(call.name, problems))
    checked = attrs.evolve(call, arguments=args)
    try:
        target = _target(host, tool, checked, view)
    except _ArgumentError as exc:
        return error_result(call, invalid_arguments(call.name, [str(exc)]))
    run_timeout = None if timeout is None else max(timeout - spent, _MIN_RUN_S)
    return Plan(tool=tool, call=checked, target=target, timeout=timeout, run_timeout=run_timeout)


def validation_budget_s(timeout: float | None) -> float:
    """Seconds a call's argument validation may take: the default, at most the timeout."""
    return DEFAULT_BUDGET_S if timeout is None else min(DEFAULT_BUDGET_S, timeout)


class _ArgumentError(Exception):
    """An argument that fits the schema but that its type refuses (a class's validator)."""


def _alternatives(host: ToolHost, view: ToolsView) -> str:
    """What the model may call instead of a refused tool: the advertised names.

    Silent tools stay unnamed (that is what silent means), but when they are all there
    is, "none" would be false: they still run when the model's instructions name them.
    """
    names = sorted(spec.name for spec in host.tool_specs(view))
    if names:
        return f"Available tools: {', '.join(names)}."
    if view.silent():
        return "No tools are advertised here; call only a tool your instructions name."
    return "No tools are available here; answer without calling one."


def _target(
    catalog: ToolCatalog, tool: RegisteredTool, call: ToolCall, view: ToolsView
) -> Callable[[], Any]:
    handler = tool.handler
    assert handler is not None
    if tool.kind is ToolKind.EXTERNAL or tool.signature is None:
        return lambda: handler(call)
    sig = tool.signature
    kwargs: dict[str, Any] = {}
    for key, value in call.arguments.items():
        tp = sig.params.get(key, inspect.Parameter.empty)  # **kwargs extras pass as sent
        if tp not in _PASSTHROUGH and value is not None:
            try:
                value = converter.structure(value, tp)
            except Exception as exc:
                raise _ArgumentError(error_text(exc, key)) from exc
        kwargs[key] = value
    if sig.context_param is not None:
        kwargs[sig.context_param] = ToolContext(toolbox=catalog, view=view, call=call)
    return lambda: handler(**kwargs)


@attrs.frozen
class Rendered:
    """A finished run as text, made on the tool's own thread (see ``rendering``)."""

    text: str
    is_error: bool  # an error result: the tool raised, or returned one
    failed: bool  # the tool raised or gave no usable result: not remembered by the budget
    traceback: str | None = None  # what the tool raised, for people (``ToolResult.traceback``)


def rendering(plan: Plan) -> ex.Render:
    """What turns ``plan``'s outcome into a ``Rendered`` where the tool ran.

    Converting the value is the tool's work too: a ``__str__`` that queries a
    database or a huge structure to JSON-encode counts against its timeout and never
    blocks the caller's event loop (``aexecute``).
    """

    def render(outcome: ex.Outcome) -> ex.Outcome:
        return ex.Outcome(value=_rendered(plan, outcome))

    return render


def _rendered(plan: Plan, outcome: ex.Outcome) -> Rendered:
    if outcome.error is not None:
        error = outcome.error
        return Rendered(
            _failure_text(plan, error),
            is_error=True,
            failed=True,
            traceback=ex.failure_traceback(error),
        )
    value = outcome.value
    content = value.content if isinstance(value, ToolResult) else value
    if isinstance(content, (Iterator, AsyncIterator)):
        return Rendered(_iterator_text(plan, content), is_error=True, failed=True)
    if isinstance(value, ToolResult):
        # A ToolResult built by the tool is not checked: content that is not text is
        # encoded like any other return value.
        return Rendered(ex.output_text(value.content), is_error=value.is_error, failed=False)
    return Rendered(ex.output_text(value), is_error=False, failed=False)


def _iterator_text(plan: Plan, value: object) -> str:
    """Why a returned generator or other iterator is not a result (registration refuses
    generator functions; one returned at run time is caught here). Reading it could
    never end, and its text is only ``<generator object ...>``."""
    kind = type(value).__name__
    return (
        f"Tool {plan.tool.name!r} returned a {kind} (an iterator) instead of a result; "
        "the tool is broken, so answer without it. (For its author: return a list, "
        "e.g. list(...).)"
    )


def _failure_text(plan: Plan, exc: BaseException) -> str:
    """The error text for whatever the tool raised (not only ``Exception``s)."""
    name = plan.tool.name
    if isinstance(exc, SystemExit):
        # argparse-style tools exit on bad arguments, after printing to stderr.
        try:
            status = repr(exc.code)
        except Exception:  # sys.exit(obj) takes any object, one whose repr fails too
            status = ex.printable(exc.code)
        text = (
            f"Tool {name!r} exited (SystemExit, status {status}) instead of returning "
            "a result; check the arguments and call it again."
        )
    elif isinstance(exc, asyncio.CancelledError):
        text = (
            f"Tool {name!r} was cancelled from inside (the tool or a task it awaited) "
            "before it returned a result."
        )
    else:
        message = ex.printable(exc)
        detail = f": {message}" if message else ""
        text = f"Tool {name!r} failed: {type(exc).__name__}{detail}"
    return text


def finish(
    plan: Plan, outcome: ex.Outcome, budget: BudgetTracker | None, max_chars: int | None
) -> ToolResult:
    """The result of a run: its output text capped at ``max_chars``, or why it has none.

    ``outcome`` holds a ``Rendered`` (the run was given ``rendering(plan)``), or is a
    timeout, or holds what rendering itself raised on the tool's thread.
    """
    if outcome.timed_out:
        text = f"Tool {plan.tool.name!r} timed out after {plan.timeout:g} s; "
        if outcome.still_running:
            # Python cannot kill a thread: say so, as the tool may still act (write a
            # file, send a message) after the model was told it failed.
            text += (
                "it could not be stopped and may still finish its work in the background, "
                "but its result will be discarded."
            )
        else:
            text += "it has stopped and gave no result in time."
        text += " Try simpler arguments or another approach."
        return error_result(plan.call, text, traceback=_timeout_traceback(plan, outcome))
    rendered = outcome.value
    if not isinstance(rendered, Rendered):
        rendered = _rendered(plan, outcome)
    if rendered.failed:
        return error_result(plan.call, rendered.text, traceback=rendered.traceback)
    text, is_error = rendered.text, rendered.is_error
    text, truncated = ex.cap(text, max_chars)
    if budget is not None:
        budget.record(plan.call, text)
    return ToolResult(
        name=plan.call.name,
        content=text,
        call_id=plan.call.id,
        is_error=is_error,
        truncated=truncated,
    )


def _timeout_traceback(plan: Plan, outcome: ex.Outcome) -> str | None:
    """For people: where the tool was when it was given up on, if that could be read."""
    if outcome.where is None:
        return None
    return f"Tool {plan.tool.name!r} timed out after {plan.timeout:g} s here:\n{outcome.where}"


def error_result(call: ToolCall, text: str, traceback: str | None = None) -> ToolResult:
    """An error result; ``traceback`` is for people only (``ToolResult.traceback``)."""
    return ToolResult(
        name=call.name, content=text, call_id=call.id, is_error=True, traceback=traceback
    )


def invalid_arguments(name: str, problems: list[str]) -> str:
    listed = "; ".join(problems)
    return f"Invalid arguments for tool {name!r}: {listed}. Fix the arguments and call it again."


def internal_error(call: ToolCall, exc: Exception) -> ToolResult:
    text = f"Tool {call.name!r} could not be run because of an internal error ({exc!r})."
    return error_result(call, text, traceback=ex.failure_traceback(exc))


def without_asking(plan: Plan, policy: Approval) -> Plan | ToolResult:
    """The approval outcome when nobody is asked: ``plan`` when allowed, else the denial."""
    name = plan.tool.name
    if policy is Approval.ALLOW:
        return plan
    if policy is Approval.DENY:
        return error_result(plan.call, f"Tool {name!r} is not allowed; do not call it again.")
    return error_result(
        plan.call,
        f"Tool {name!r} needs the user's approval and nobody can approve it now; "
        "it was not run. Continue without it.",
    )


def approval_request(plan: Plan) -> ApprovalRequest:
    tool = plan.tool
    return ApprovalRequest(call=plan.call, risk=tool.risk, description=tool.spec.description)


def approval_failed(plan: Plan, exc: BaseException) -> ToolResult:
    text = f"Approving the call of {plan.tool.name!r} failed ({exc!r}); it was not run."
    return error_result(plan.call, text, traceback=ex.failure_traceback(exc))


def delivered(result: ToolResult, start: float, max_chars: int | None) -> ToolResult:
    """``result`` as the caller gets it: timed from ``start`` and within the output cap.

    Every result, errors included, respects the cap (once).
    """
    result = attrs.evolve(result, duration_s=time.perf_counter() - start)
    if result.truncated:
        return result
    text, truncated = ex.cap(result.content, max_chars)
    return attrs.evolve(result, content=text, truncated=True) if truncated else result
