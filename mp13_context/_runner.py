# SPDX-License-Identifier: MIT
"""The turn runner: effective settings -> engine request -> tool rounds -> recorded turns.

One ``Exchange`` runs one reply loop from a node. It is also the handle of the
running exchange: its cursor holds it while it runs and follows ``at`` (the
last node recorded), and ``cancel()`` stops the request in flight. Each round:

1. Build a ``Request`` for the reply after ``at`` (``_request.request_at``:
   system message, adapters, advertised tools of the node's tools view,
   parameters with the overrides) and send it (``astream`` when there is an
   event callback, else ``agenerate``, in a task of its own so that a cancelled
   caller still gets the response with the partial text). While it is in flight its
   id is in the scope's ``running`` registry, so ``ChatContext.cancel(id)`` finds it.
2. A reply without tool calls is recorded as a node at once.
3. A reply cut at the token limit is continued (``continue_final``) up to
   ``max_continuations`` times; each continuation is its own node, joined to
   the reply when rendered (``_messages.joined``).
4. A reply with tool calls runs them through the toolbox with the node's view,
   the context's approval callback and a per-turn ``ToolBudget``; the reply
   and the tool turn holding every call's result are then recorded together,
   in one transaction (``Session.append_turns``), so the tree never holds a
   call without its result. Then the loop generates again, up to
   ``max_tool_rounds`` rounds; calls beyond the limit get error results (so
   every call has a result) and the loop stops.

Failure rules: an engine error or exception is recorded on the turn
(``Turn.error``) and ends the loop; a tool failure is an error ``ToolResult``
(its ``traceback`` kept on the result for people, never sent)
fed back to the model. Neither raises. Cancelling (``cancel()``, by id through
the context, or cancelling the task) records the turn with ``cancelled=True``
and the partial text; task cancellation is then re-raised, as asyncio expects.
An exception from an event callback during a tool round (or Ctrl+C) is raised
too, after the reply and the results of the calls that ran are recorded.
A request cancelled before it reached the engine (while the ``REQUEST`` event's
callback ran) is never sent and ends ``CANCELLED`` with no text. A failure to
record (``StoreError``, e.g. a full disk) raises it to the caller, and nothing
of the turn that failed is recorded.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Mapping
from typing import Any

import attrs

from mp13_context._errors import StoreError
from mp13_context._events import Event, EventCallback, EventKind
from mp13_context._messages import whole_turn
from mp13_context._model import Role, Turn, new_id
from mp13_context._request import request_at, run_params, tool_view
from mp13_context._scope import ScopeState
from mp13_engine import FinishReason, Request, Response
from mp13_toolbox import BudgetTracker, Toolbox, ToolBudget, ToolCall, ToolResult, ToolsView


class Exchange:
    """One run of the reply loop from node ``at`` (see the module docstring).

    ``overrides``: parameters for this run's requests on top of the path's.
    The constructor checks that there is an engine and that replies can be
    recorded, before anything happens.
    """

    def __init__(
        self,
        scope: ScopeState,
        at: str,
        overrides: Mapping[str, Any],
        on_event: EventCallback | None,
    ) -> None:
        self.engine = scope.require_engine()
        scope.require_writable()
        self.scope = scope
        self.session = scope.session
        self.at = at
        self.overrides = dict(overrides)
        self.on_event = on_event if on_event is not None else scope.on_event
        self.request_id: str | None = None
        self._sent = False  # the request in flight went to the engine
        self._cancel_before_send = False
        self._results: list[ToolResult] = []  # the current tool round's results so far
        # the engine's response to the last request, for its reply's TURN event (None: none)
        self._engine_response: Response | None = None

    # --- the handle --------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the request in flight; True if there was one.

        One still on its way (its ``REQUEST`` event's callback is running) is never
        sent; one in the engine is cancelled there.
        """
        if self.request_id is None:
            return False
        if not self._sent:
            self._cancel_before_send = True
            return True
        return bool(self.engine.cancel(self.request_id))

    # --- the loop ----------------------------------------------------------------------

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        """Report an event to the callback (sync or async), if there is one."""
        if self.on_event is not None:
            out: Any = self.on_event(Event(kind=kind, **fields))
            if inspect.isawaitable(out):
                await out

    async def ask(self, text: str) -> None:
        """Record the user turn that opens this exchange."""
        node = self.record([Turn(role=Role.USER, text=text)])[0]
        await self.emit(EventKind.USER, node_id=node, turn=self.session.node(node).turn)

    async def run(self, *, continue_first: bool = False) -> Turn:
        """The reply loop from ``at``; returns the final assistant turn, continuations
        joined."""
        params = run_params(self.session.settings_at(self.at), self.overrides)
        budget = ToolBudget(
            max_calls=params["max_tool_calls"], max_rounds=params["max_tool_rounds"]
        ).start()
        rounds = continuations = 0
        continuing = continue_first
        auto = False
        while True:
            request = request_at(
                self.session, self.scope.toolbox, self.at, self.overrides, continue_final=continuing
            )
            turn, task_cancelled = await self.generate(request, continuation=continuing, auto=auto)
            auto = True
            calls = () if turn.cancelled or turn.error is not None else turn.tool_calls
            if not calls:
                reply = await self.record_turns(turn)
                if task_cancelled:
                    raise asyncio.CancelledError
                ended = turn.cancelled or turn.error is not None
                if turn.truncated and not ended and continuations < params["max_continuations"]:
                    continuations += 1
                    continuing = True
                    continue
                break
            continuing = False
            try:
                results, go_on = await self.tool_round(calls, budget, rounds, params)
            except BaseException as exc:
                # Cancelled, or an event callback raised (or Ctrl+C): keep the tree well
                # formed and keep what ran (tools may have acted): every call gets a
                # result, done or not run, recorded before the exception goes on.
                why = (
                    "cancelled"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"not executed: the turn stopped ({type(exc).__name__})"
                )
                done = [*self._results]
                done += [error_result(c, why) for c in calls[len(done) :]]
                tool_turn = Turn(role=Role.TOOL, tool_results=tuple(done), auto=True)
                await self.record_turns(turn, tool_turn)
                raise
            rounds += 1
            reply = await self.record_turns(
                turn, Turn(role=Role.TOOL, tool_results=tuple(results), auto=True)
            )
            if not go_on:
                break
        final = whole_turn(self.session.path(reply))
        await self.emit(EventKind.DONE, node_id=reply, turn=final)
        return final

    # --- recording ---------------------------------------------------------------------

    def record(self, turns: list[Turn]) -> list[str]:
        """Append ``turns`` below ``at`` as a chain in one transaction; ``at`` follows.

        A ``StoreError`` leaves nothing of them recorded; it says so, and what to do.
        """
        try:
            nodes = self.session.append_turns(self.at, turns)
        except StoreError as exc:
            what = " and ".join(t.role.value for t in turns)
            if self.session.closed:  # closed while the reply ran: no disk to free
                todo = "open the session again with Session.open(path), then try again"
            else:
                todo = "fix what the store error says, then try again"
            raise type(exc)(
                f"could not record the {what} turn ({exc}); nothing of it was recorded and "
                f"the cursor stays at node {self.at}: {todo}"
            ) from exc
        self.at = nodes[-1].id
        return [n.id for n in nodes]

    async def record_turns(self, *turns: Turn) -> str:
        """Record a reply (and the tool turn of its round) and report each; return the
        reply's node id."""
        ids = self.record(list(turns))
        response, self._engine_response = self._engine_response, None
        for node_id in ids:
            turn = self.session.node(node_id).turn
            await self.emit(EventKind.TURN, node_id=node_id, turn=turn, response=response)
            response = None  # the reply's only (it comes first), not its tool turn's
        return ids[0]

    # --- generating --------------------------------------------------------------------

    async def generate(
        self, request: Request, *, continuation: bool, auto: bool
    ) -> tuple[Turn, bool]:
        """Run one request; return the assistant turn and whether the task was cancelled."""
        rid = request.id
        base = Turn(role=Role.ASSISTANT, continuation=continuation, auto=auto, request_id=rid)
        self.request_id = rid
        self._engine_response = None
        self.scope.running[rid] = self.cancel
        try:
            await self.emit(EventKind.REQUEST, request_id=rid)
            return await self._response(request, base)
        finally:
            self.scope.running.pop(rid, None)
            self.request_id = None
            self._sent = self._cancel_before_send = False

    async def _response(self, request: Request, base: Turn) -> tuple[Turn, bool]:
        text: list[str] = []
        reasoning: list[str] = []
        pending: asyncio.Future[Response] | None = None
        try:
            if self._cancel_before_send:
                response = Response(id=request.id, finish_reason=FinishReason.CANCELLED)
            elif self.on_event is None:
                # A task of its own, so its response can still be had when the awaiting
                # task is cancelled: the engine resolves a cancelled request with its text.
                pending = asyncio.ensure_future(self._send(request))
                response = await asyncio.shield(pending)
            else:
                self._sent = True
                response = await self._stream(request, text, reasoning)
        except asyncio.CancelledError:
            self.cancel()  # in the engine, or (its task not started yet) never sent
            ended: dict[str, Any] = {"finish_reason": FinishReason.CANCELLED, "cancelled": True}
            task_cancelled = True
            if pending is not None and (cut := await _cancelled_response(pending)) is not None:
                text, reasoning = [cut.text], [cut.reasoning]
                ended["metrics"] = cut.metrics
        except Exception as exc:  # an engine failure is recorded, never raised
            error = f"engine failed: {type(exc).__name__}: {exc}"
            ended, task_cancelled = {"finish_reason": FinishReason.ERROR, "error": error}, False
        else:
            self._engine_response = response
            return from_response(base, response), False
        # Either way the turn keeps what was streamed before it ended.
        partial = attrs.evolve(base, text="".join(text), reasoning="".join(reasoning), **ended)
        return partial, task_cancelled

    async def _send(self, request: Request) -> Response:
        """``agenerate`` the request, unless it was cancelled before this task started."""
        if self._cancel_before_send:
            return Response(id=request.id, finish_reason=FinishReason.CANCELLED)
        self._sent = True
        return await self.engine.agenerate(request)

    async def _stream(self, request: Request, text: list[str], reasoning: list[str]) -> Response:
        rid = request.id
        response = None
        async for chunk in self.engine.astream(request):
            if chunk.reasoning:
                reasoning.append(chunk.reasoning)
                await self.emit(EventKind.REASONING, text=chunk.reasoning, request_id=rid)
            if chunk.text:
                text.append(chunk.text)
                await self.emit(EventKind.TEXT, text=chunk.text, request_id=rid)
            if chunk.tool_call is not None:
                await self.emit(EventKind.TOOL_CALL, tool_call=chunk.tool_call, request_id=rid)
            if chunk.done:
                response = chunk.response
        if response is None:
            raise RuntimeError("the engine's stream ended without a final chunk")
        return response

    # --- tools -------------------------------------------------------------------------

    async def tool_round(
        self,
        calls: tuple[ToolCall, ...],
        budget: BudgetTracker,
        rounds: int,
        params: Mapping[str, Any],
    ) -> tuple[list[ToolResult], bool]:
        """Execute one round; return the results and whether to generate again."""
        toolbox = self.scope.toolbox
        limit = params["max_tool_rounds"]
        refusal = None
        if toolbox is None:
            refusal = (
                "not executed: no toolbox is attached to this context (ChatContext(toolbox=...))"
            )
        elif rounds >= limit:
            refusal = (
                f"not executed: this turn reached its limit of {limit} tool rounds "
                "(raise it with cursor.params.set(max_tool_rounds=...))"
            )
        self._results = []
        view = None
        if toolbox is not None and refusal is None:
            budget.start_round()
            view = tool_view(toolbox, self.session.settings_at(self.at))
        for call in calls:
            if toolbox is not None and refusal is None:
                result = await self._execute(toolbox, call, view, budget)
            else:
                result = error_result(call, refusal or "")  # refusal is set without a toolbox
            self._results.append(result)
            await self.emit(EventKind.TOOL_RESULT, tool_result=result)
        return self._results, refusal is None

    async def _execute(
        self, toolbox: Toolbox, call: ToolCall, view: ToolsView | None, budget: BudgetTracker
    ) -> ToolResult:
        try:
            result = await toolbox.aexecute(call, view, approval=self.scope.approval, budget=budget)
        except Exception as exc:  # the toolbox should not raise; never lose a call if it does
            text = f"tool {call.name} failed: {type(exc).__name__}: {exc}"
            trace = "".join(traceback.format_exception(exc))
            result = attrs.evolve(error_result(call, text), traceback=trace)
        return result if result.call_id is not None else attrs.evolve(result, call_id=call.id)


# How long a cancelled task waits for the engine's response to the request it cancelled
# (for its partial text). ``Engine.cancel`` resolves the request before it returns, so
# this only bounds an engine that is slow to honour a cancel.
CANCELLED_RESPONSE_WAIT_S = 5.0


async def _cancelled_response(pending: asyncio.Future[Response]) -> Response | None:
    """The response of a request just cancelled, or None: the engine failed, did not
    answer within ``CANCELLED_RESPONSE_WAIT_S``, or the task was cancelled again."""
    try:
        await asyncio.wait({pending}, timeout=CANCELLED_RESPONSE_WAIT_S)
    except asyncio.CancelledError:
        pending.cancel()
        raise
    if not pending.done():
        pending.cancel()
        return None
    if pending.cancelled() or pending.exception() is not None:
        return None
    return pending.result()


def error_result(call: ToolCall, content: str) -> ToolResult:
    """The error result ``call`` gets when it did not run (or failed)."""
    return ToolResult(name=call.name, content=content, call_id=call.id, is_error=True)


def from_response(base: Turn, resp: Response) -> Turn:
    """The assistant turn ``base`` filled in from the engine's response (every call has
    an id, an error always has a message)."""
    calls = tuple(
        c if c.id else attrs.evolve(c, id=f"call_{new_id()[:12]}") for c in resp.tool_calls
    )
    error = resp.error
    if resp.finish_reason is FinishReason.ERROR and not error:
        error = "the engine reported an error without a message"
    return attrs.evolve(
        base,
        text=resp.text,
        reasoning=resp.reasoning,
        tool_calls=calls,
        finish_reason=resp.finish_reason,
        metrics=resp.metrics,
        truncated=resp.finish_reason is FinishReason.LENGTH,
        cancelled=resp.finish_reason is FinishReason.CANCELLED,
        error=error,
        parse_errors=resp.parse_errors,
    )
