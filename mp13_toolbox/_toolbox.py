# SPDX-License-Identifier: MIT
"""``Toolbox``: register tools, resolve views, execute calls safely.

A toolbox is an ordinary object (several may coexist) and is safe to use from
threads and asyncio: the registry and remembered approvals sit behind a lock,
each call works on a frozen snapshot of its tool. Typical turn flow in a
runner (the context layer does exactly this)::

    view = tb.view(scopes)                        # ToolsView for this node
    request.tools = tb.specs(view)                # OpenAI-style dicts, ADVERTISED only
    budget = ToolBudget(max_calls=8, max_rounds=4).start()    # one per user turn
    budget.start_round()                          # before each round of calls
    result = await tb.aexecute(call, view, approval=approver, budget=budget)

``execute`` / ``aexecute`` never raise because of the call or the tool: an
unknown, disabled or unresolved tool, bad arguments, a denied approval, a
spent budget, an exception or a timeout all become a ``ToolResult`` with
``is_error=True`` and a message the model can act on. Only misuse by the
caller (e.g. passing a ``ToolBudget`` instead of its ``start()`` tracker) raises.

Steps of one call: look up (view + registry) -> budget -> validate arguments
-> approval -> run with timeout -> output text, capped. What registration is given
is checked in :mod:`~mp13_toolbox._registration`; remembered answers, per-risk
defaults and the asking are :mod:`~mp13_toolbox._approval_state`'s; the steps
themselves are :mod:`~mp13_toolbox._pipeline`'s.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from mp13_toolbox import _execute as ex
from mp13_toolbox import _pipeline as pl
from mp13_toolbox._approval import (
    Approval,
    ApprovalAnswer,
    Approver,
    Risk,
    as_approval,
    as_risk,
)
from mp13_toolbox._approval_state import ApprovalState
from mp13_toolbox._budget import BudgetTracker
from mp13_toolbox._builtins import BUILTINS
from mp13_toolbox._errors import (
    ToolboxError,
    ToolRegistrationError,
    ToolSettingError,
    UnknownToolError,
)
from mp13_toolbox._registration import (
    as_timeout,
    builtin_names,
    external_spec,
    new_tool,
    warn_undescribed,
)
from mp13_toolbox._registry import ToolInfo, ToolKind, ToolRegistry
from mp13_toolbox._schema import function_spec
from mp13_toolbox._scopes import ToolsScope, ToolsView, is_pattern
from mp13_toolbox._snapshot import ToolboxSnapshot, relink, restore_callables
from mp13_toolbox._types import ToolCall, ToolMode, ToolResult, ToolSpec
from mp13_toolbox._validate import check_limit

_F = TypeVar("_F", bound=Callable[..., Any])


class Toolbox:
    """Tools from Python functions or JSON specs, with modes, approval and budgets.

    ``builtins``: ``True`` registers every builtin tool (``BUILTINS``), a name or
    a list of names those. ``max_output_chars`` and ``default_timeout_s``: see the
    properties of those names. ``approval_defaults``: per-risk policies replacing
    ``DEFAULT_APPROVALS`` for the risks named (``{"medium": "allow"}``; the others
    keep theirs).
    """

    def __init__(
        self,
        builtins: bool | Iterable[str] = False,
        *,
        max_output_chars: int | None = 16_000,
        default_timeout_s: float | None = 30.0,
        approval_defaults: Mapping[Risk | str, Approval | str] | None = None,
    ) -> None:
        self._registry = ToolRegistry()
        self._max_output_chars: int | None = None
        self._default_timeout_s: float | None = None
        self.max_output_chars = max_output_chars
        self.default_timeout_s = default_timeout_s
        # Remembered answers, per-risk defaults and the asking (behind the registry's lock).
        self._approvals = ApprovalState(self._registry, approval_defaults)
        if builtins:  # a name, or names: add_builtins reads a str as one name, not letters
            self.add_builtins(None if builtins is True else builtins)

    @property
    def max_output_chars(self) -> int | None:
        """Longest tool result kept (longer ones are cut, ``truncated``); None: no cap."""
        return self._max_output_chars

    @max_output_chars.setter
    def max_output_chars(self, value: int | None) -> None:
        message = "max_output_chars must be a whole number > 0 or None (no cap)"
        check_limit(value, "integer", ToolSettingError, message)
        self._max_output_chars = value

    @property
    def default_timeout_s(self) -> float | None:
        """Seconds a tool without its own ``timeout_s`` may run; None: no limit."""
        return self._default_timeout_s

    @default_timeout_s.setter
    def default_timeout_s(self, value: float | None) -> None:
        message = "default_timeout_s must be a number of seconds > 0 or None"
        check_limit(value, "number", ToolSettingError, message)
        self._default_timeout_s = value

    # registration -------------------------------------------------------------------------

    @overload
    def register(
        self,
        func: _F,
        *,
        name: str | None = ...,
        description: str | None = ...,
        mode: ToolMode | str = ...,
        risk: Risk | str = ...,
        timeout_s: float | None = ...,
        approval: Approval | str | None = ...,
        replace: bool = ...,
    ) -> _F: ...
    @overload
    def register(
        self,
        func: None = None,
        *,
        name: str | None = ...,
        description: str | None = ...,
        mode: ToolMode | str = ...,
        risk: Risk | str = ...,
        timeout_s: float | None = ...,
        approval: Approval | str | None = ...,
        replace: bool = ...,
    ) -> Callable[[_F], _F]: ...

    def register(
        self,
        func: _F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        mode: ToolMode | str = ToolMode.ADVERTISED,
        risk: Risk | str = Risk.LOW,
        timeout_s: float | None = None,
        approval: Approval | str | None = None,
        replace: bool = False,
    ) -> _F | Callable[[_F], _F]:
        """Register ``func`` as a tool; its schema comes from its signature and docstring.

        Returns ``func`` unchanged, so it also works as ``@tb.register`` or
        ``@tb.register(risk="high")``. ``name``/``description`` override the
        function's ``__name__`` and docstring summary. ``mode``: the tool's global
        mode (the ceiling every view keeps). ``timeout_s=None`` uses the toolbox
        default; ``approval=None`` uses the default for ``risk`` (see
        ``approval_defaults``: ``low`` is allowed, ``medium`` and ``high`` ask).
        A name already registered raises ``ToolRegistrationError`` unless
        ``replace=True``. A function with no description (no docstring summary and no
        ``description=``) is registered with a ``ToolDescriptionWarning``: the model
        would see only its name; ``description=""`` keeps it empty without one.
        """

        def add(f: _F, depth: int = 1) -> _F:
            if not callable(f):
                raise ToolRegistrationError(f"register() needs a callable, got {f!r}")
            spec, signature = function_spec(f, name=name, description=description)
            tool = new_tool(spec, ToolKind.FUNCTION, f, signature, mode, risk, timeout_s, approval)
            self._registry.add(tool, replace=replace)
            if description is None and not spec.description.strip():
                warn_undescribed(spec.name, stacklevel=2 + depth)
            return f

        return add if func is None else add(func, depth=2)

    def register_external(
        self,
        spec: Mapping[str, Any] | ToolSpec,
        handler: Callable[[ToolCall], object],
        *,
        mode: ToolMode | str = ToolMode.ADVERTISED,
        risk: Risk | str = Risk.LOW,
        timeout_s: float | None = None,
        approval: Approval | str | None = None,
        replace: bool = False,
    ) -> ToolInfo:
        """Register a tool from an OpenAI-style spec and ``handler(call)`` (sync or async).

        A schema keyword that constrains arguments but that validation does not check
        (``if``, ``patternProperties``, a ``$ref`` to another document...) raises
        ``ToolRegistrationError`` here rather than let arguments through unchecked.

        The handler gets the ``ToolCall`` with validated arguments and returns a
        ``str``, a ``ToolResult`` or any JSON-able value.
        """
        tool_spec = external_spec(spec, handler)
        tool = new_tool(
            tool_spec, ToolKind.EXTERNAL, handler, None, mode, risk, timeout_s, approval
        )
        self._registry.add(tool, replace=replace)
        return tool.info()

    def add_builtins(self, names: str | Iterable[str] | None = None) -> list[str]:
        """Register the builtin tools (all, one, or those named) via ``register``; return
        the added.

        A name already registered here is left alone: a user's tool of the same name
        is never replaced, and a builtin is never added twice.
        """
        added = []
        for n in builtin_names(names):
            if n not in self:
                self.register(BUILTINS[n], name=n)
                added.append(n)
        return added

    def unregister(self, name: str) -> ToolInfo:
        """Remove a tool; raises ``UnknownToolError`` for an unknown name."""
        with self._registry.lock:
            self._approvals.remembered.pop(name, None)
            return self._registry.remove(name).info()

    # Below this method, ``list`` in an annotation would name it: they say builtins.list.
    def list(self) -> builtins.list[ToolInfo]:
        """Every registered tool, in registration order, incl. unresolved ones."""
        return [t.info() for t in self._registry.snapshot()]

    def get(self, name: str) -> ToolInfo:
        """One tool's info; raises ``UnknownToolError`` for an unknown name."""
        return self._registry.require(name).info()

    def names(self) -> builtins.list[str]:
        """Every registered tool's name, in registration order."""
        return [t.name for t in self._registry.snapshot()]

    def unresolved(self) -> builtins.list[str]:
        """Names restored from a snapshot whose callables could not be relinked."""
        return [t.name for t in self._registry.snapshot() if not t.resolved]

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __repr__(self) -> str:
        return f"Toolbox(tools={self.names()!r})"

    def __len__(self) -> int:
        return len(self._registry)

    # settings -----------------------------------------------------------------------------

    def set_mode(self, target: str, mode: ToolMode | str) -> builtins.list[str]:
        """Set the global mode of a tool, or of all tools matching a pattern (``"*"``,
        ``"web_*"``: ``fnmatch``, as in ``ToolsScope``); returns the names changed.
        ``UnknownToolError`` when no registered tool has that name or matches it."""
        if not isinstance(target, str):
            raise ToolSettingError(f"set_mode takes a tool name or pattern, not {target!r}")
        scope = ToolsScope({target: mode})
        changed = []
        with self._registry.lock:
            for tool in self._registry.snapshot():
                new = scope.mode_for(tool.name)
                if new is not None:
                    self._registry.update(tool.name, mode=new)
                    changed.append(tool.name)
        if not changed:
            if not is_pattern(target):
                raise self._registry.unknown_tool_error(target)
            known = ", ".join(self.names()) or "none registered"
            raise UnknownToolError(
                f"no tool matches the pattern {target!r} in this toolbox; known tools: {known}"
            )
        return changed

    def set_risk(self, name: str, risk: Risk | str) -> None:
        """A tool's risk (``low``/``medium``/``high``): picks its default approval policy."""
        self._registry.update(name, risk=as_risk(risk))

    def set_timeout(self, name: str, timeout_s: float | None) -> None:
        """A tool's timeout in seconds; ``None`` = the toolbox's ``default_timeout_s``."""
        self._registry.update(name, timeout_s=as_timeout(timeout_s))

    def set_approval(self, name: str, policy: Approval | str | None) -> None:
        """A tool's own policy (``allow``/``deny``/``ask``); ``None`` = risk default."""
        self._registry.update(name, approval=as_approval(policy))

    @property
    def approval_defaults(self) -> dict[Risk, Approval]:
        """The policy of each risk for tools without their own (a copy)."""
        return dict(self._approvals.defaults)

    def set_approval_default(self, risk: Risk | str, policy: Approval | str) -> None:
        """The policy for tools of ``risk`` that have none of their own."""
        self._approvals.set_default(risk, policy)

    def remember(self, name: str, answer: ApprovalAnswer | str | None) -> None:
        """Store an ``always``/``never`` answer for a tool (``None`` forgets it)."""
        self._approvals.remember(name, answer)

    def remembered(self) -> dict[str, ApprovalAnswer]:
        """The ``always``/``never`` answers kept per tool name (a copy)."""
        with self._registry.lock:
            return dict(self._approvals.remembered)

    # views and specs ----------------------------------------------------------------------

    def view(self, scopes: Iterable[ToolsScope] | ToolsScope = ()) -> ToolsView:
        """Resolve ``scopes`` over the tools' global modes (unresolved tools are left out).

        The global modes are a ceiling: ``scopes`` can hide or disable tools, never
        enable or advertise more than this toolbox does (see ``mp13_toolbox._scopes``).
        Pass a conversation's layers here as they are, whoever wrote them.
        """
        base = {t.name: t.mode for t in self._registry.snapshot() if t.resolved}
        return ToolsView.resolve(base, scopes)

    def tool_specs(self, view: ToolsView | None = None) -> builtins.list[ToolSpec]:
        """``ToolSpec`` of each ADVERTISED tool of ``view``, in registration order.

        A tool is listed only if this toolbox advertises it too (the ceiling holds
        for a view made by hand or before a ``set_mode``).
        """
        pl.check_view(view)
        view = self.view() if view is None else view
        return [
            t.spec
            for t in self._registry.snapshot()
            if t.resolved
            and t.mode is ToolMode.ADVERTISED
            and view.mode(t.name) is ToolMode.ADVERTISED
        ]

    def specs(self, view: ToolsView | None = None) -> builtins.list[dict[str, Any]]:
        """OpenAI-style specs of the ADVERTISED tools: what ``Request.tools`` gets."""
        # Deep copies: a consumer that edits a request's schema must not edit ours.
        return [copy.deepcopy(s.to_openai()) for s in self.tool_specs(view)]

    # execution ----------------------------------------------------------------------------

    def execute(
        self,
        call: ToolCall,
        view: ToolsView | None = None,
        approval: Approver | None = None,
        budget: BudgetTracker | None = None,
    ) -> ToolResult:
        """Run one call and return its result; never raises because of the tool.

        What a tool raises (``SystemExit`` and ``GeneratorExit`` included) becomes an
        error result; only a ``KeyboardInterrupt`` on the calling thread (Ctrl+C)
        propagates (see ``_execute``).
        """
        start = time.perf_counter()
        pl.check_arguments(call, view, budget, approval)
        try:
            step = self._prepare(call, view, budget)
            if isinstance(step, pl.Plan):
                step = self._approvals.approve(step, approval)
            if isinstance(step, pl.Plan):
                outcome = ex.call_blocking(
                    step.target, step.tool.is_async, step.run_timeout, pl.rendering(step)
                )
                step = pl.finish(step, outcome, budget, self.max_output_chars)
        except Exception as exc:  # a bug of ours must not crash the caller's turn either
            step = pl.internal_error(call, exc)
        return pl.delivered(step, start, self.max_output_chars)

    async def aexecute(
        self,
        call: ToolCall,
        view: ToolsView | None = None,
        approval: Approver | None = None,
        budget: BudgetTracker | None = None,
    ) -> ToolResult:
        """Async twin of ``execute``; every tool runs on a worker thread, never on the loop.

        An async tool runs on its own event loop there, so one that blocks cannot
        stall this loop and still times out. A sync ``approval`` callback is called
        on the loop thread; if it blocks (e.g. ``input()``), pass an async one
        instead. Cancelling the awaiting task propagates and cancels an async tool;
        a sync tool's thread is abandoned. What a tool raises, ``CancelledError``
        and ``SystemExit`` included, is an error result (see ``_execute``).
        """
        start = time.perf_counter()
        pl.check_arguments(call, view, budget, approval)
        try:
            step = self._prepare(call, view, budget)
            if isinstance(step, pl.Plan):
                step = await self._approvals.aapprove(step, approval)
            if isinstance(step, pl.Plan):
                outcome = await ex.call_async(step.target, step.run_timeout, pl.rendering(step))
                step = pl.finish(step, outcome, budget, self.max_output_chars)
        except Exception as exc:  # a bug of ours must not crash the caller's turn either
            step = pl.internal_error(call, exc)
        return pl.delivered(step, start, self.max_output_chars)

    async def aexecute_many(
        self,
        calls: Iterable[ToolCall],
        view: ToolsView | None = None,
        approval: Approver | None = None,
        budget: BudgetTracker | None = None,
    ) -> builtins.list[ToolResult]:
        """Run one round's calls concurrently; results in the order of ``calls``.

        Every call is checked before any runs, so a misused round runs none of them.
        """
        if isinstance(calls, (ToolCall, str, Mapping)) or not isinstance(calls, Iterable):
            raise ToolboxError(
                f"aexecute_many takes a list of ToolCalls, not {type(calls).__name__}; "
                "wrap one call as [call], or run it with aexecute"
            )
        calls = builtins.list(calls)
        for i, call in enumerate(calls):
            try:
                pl.check_arguments(call, view, budget, approval)
            except ToolboxError as exc:
                if isinstance(call, ToolCall):  # a shared argument: no one call to name
                    raise
                raise ToolboxError(f"calls[{i}]: {exc}") from exc
        return list(
            await asyncio.gather(*(self.aexecute(c, view, approval, budget) for c in calls))
        )

    def _prepare(
        self, call: ToolCall, view: ToolsView | None, budget: BudgetTracker | None
    ) -> pl.Plan | ToolResult:
        view = self.view() if view is None else view
        return pl.prepare(self, self._registry.get(call.name), call, view, budget)

    # snapshot -----------------------------------------------------------------------------

    def snapshot(self) -> ToolboxSnapshot:
        """Everything but the callables, for saving (see ``ToolboxSnapshot``)."""
        with self._registry.lock:
            tools = tuple(t.record() for t in self._registry.snapshot())
            return ToolboxSnapshot(
                tools=tools,
                remembered=dict(self._approvals.remembered),
                approval_defaults=dict(self._approvals.defaults),
                max_output_chars=self.max_output_chars,
                default_timeout_s=self.default_timeout_s,
            )

    def restore(
        self,
        snapshot: ToolboxSnapshot,
        functions: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
        handlers: Mapping[str, Callable[[ToolCall], Any]] | None = None,
    ) -> builtins.list[str]:
        """Apply a snapshot; relink callables by name; return the unresolved names.

        A saved tool is relinked to, in order: a callable in ``handlers`` (for
        external tools) or ``functions`` (a list, matched by ``__name__``, or a
        ``{name: func}`` map) with its name, else the callable already
        registered here under that name, else a builtin of that name. The saved
        spec and settings win. Tools registered here but absent from the snapshot
        are kept. Saved tools with nothing to relink stay listed as unresolved
        and are never executed.
        """
        funcs, handlers = restore_callables(snapshot, functions, handlers)
        with self._registry.lock:
            for rec in snapshot.tools:
                tool = relink(rec, self._registry.get(rec.spec.name), handlers, funcs)
                self._registry.add(tool, replace=True)
            self._approvals.restore(snapshot.remembered, snapshot.approval_defaults)
            self.max_output_chars = snapshot.max_output_chars
            self.default_timeout_s = snapshot.default_timeout_s
        return self.unresolved()

    @classmethod
    def from_snapshot(
        cls,
        snapshot: ToolboxSnapshot,
        functions: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
        handlers: Mapping[str, Callable[[ToolCall], Any]] | None = None,
    ) -> Toolbox:
        """A new toolbox holding exactly the saved tools (builtins relink by themselves)."""
        tb = cls()
        tb.restore(snapshot, functions=functions, handlers=handlers)
        return tb
