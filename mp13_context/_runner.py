# SPDX-License-Identifier: MIT
"""The turn runner: resolved state -> engine request -> tool rounds -> recorded turns.

One ``Exchange`` runs one reply loop from a node:

1. Build a ``Request`` from the effective state at the node (system message,
   adapters, advertised tools of the node's tools view, parameters) plus the
   cursor's and the call's parameter overrides.
2. Generate (streaming when there is an event callback), and record the
   assistant turn as a node at once; the cursor follows every recorded node.
3. A reply cut at the token limit is continued (``continue_final``) up to
   ``max_continuations`` times; each continuation is its own node, stitched into
   one assistant message when rendered.
4. Tool calls run through the toolbox with the node's view, the context's
   approval callback and a per-turn ``ToolBudget``; the results are one tool
   node; then the loop generates again, up to ``max_tool_rounds`` rounds.
   Calls beyond the limit get error results (so every call has a result) and
   the loop stops.

Failure rules: an engine error or exception is recorded on the turn
(``Turn.error``) and ends the loop; a tool failure is an error ``ToolResult``
fed back to the model. Neither raises. Cancelling (``cursor.cancel()`` or
cancelling the task) records the turn with ``cancelled=True`` and the partial
text; task cancellation is then re-raised, as asyncio expects.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import attrs

from mp13_context._events import Event, EventCallback, EventKind, deliver
from mp13_context._messages import joined
from mp13_context._model import NodeKind, Role, Turn, new_id
from mp13_context._state import REQUEST_PARAMS, RUNNER_DEFAULTS, EffectiveState
from mp13_engine import FinishReason, Request, Response
from mp13_toolbox import BudgetState, ToolBudget, ToolCall, ToolResult

if TYPE_CHECKING:  # pragma: no cover
    from mp13_context._cursor import Cursor


def stitched(session: Any, node_id: str) -> Turn:
    """The turn at ``node_id`` as the model sees it: continuations joined to their start."""
    node = session.node(node_id)
    turn = node.turn
    if turn is None or turn.role is not Role.ASSISTANT or not turn.continuation:
        return attrs.evolve(turn, node_id=node_id) if turn is not None else turn
    parts = [turn]
    for anc in reversed(session.path(node_id)[:-1]):
        t = anc.turn
        if t is None:
            continue
        if t.role is not Role.ASSISTANT:
            break
        parts.append(t)
        if not t.continuation:
            break
    parts.reverse()
    return attrs.evolve(joined(parts), node_id=node_id)


class Gate:
    """Submits the first requests of ``n`` exchanges (a batch) to the engine together.

    Each exchange hands its first request to ``generate`` (or, when streaming,
    waits in ``arrive``); once all ``n`` are there, the requests go to the engine
    in one call of ``agenerate_many`` when the engine has it (one wave for sure),
    else as ``agenerate`` calls issued in the same loop tick. Preparing a turn can
    take longer than the engine's wait for joiners, so without the gate a batch
    could be split across waves.

    A request cancelled while it waits here (``cancel``) never reaches the
    engine; it resolves as ``CANCELLED`` with no text.
    """

    def __init__(self, n: int, engine: Any) -> None:
        self.n = n
        self.engine = engine
        self.requests: dict[str, Request] = {}
        self.streaming: set[str] = set()
        self.cancelled: set[str] = set()
        self.submitted = False
        self.event = asyncio.Event()
        self.task: asyncio.Future[dict[str, Any]] | None = None

    def _check(self) -> None:
        if len(self.requests) + len(self.streaming) >= self.n:
            self.event.set()

    def cancel(self, request_id: str) -> bool:
        """Cancel a request still waiting here; False once it went to the engine."""
        waiting = request_id in self.streaming or (
            request_id in self.requests and not self.submitted
        )
        if waiting:
            self.cancelled.add(request_id)
        return waiting

    async def arrive(self, request_id: str) -> bool:
        """For a streaming exchange: wait until the whole batch is ready.

        Returns True when the request was cancelled while it waited (do not send it).
        """
        self.streaming.add(request_id)
        self._check()
        try:
            await self.event.wait()
        except asyncio.CancelledError:
            self.streaming.discard(request_id)
            self.leave()
            raise
        self.streaming.discard(request_id)  # on its way to the engine: no longer cancellable here
        return request_id in self.cancelled

    async def generate(self, request: Request) -> Response:
        """The response to ``request``, generated together with the rest of the batch."""
        self.requests[request.id] = request
        self._check()
        try:
            await self.event.wait()
        except asyncio.CancelledError:
            self.requests.pop(request.id, None)
            self.leave()
            raise
        if self.task is None:
            self.task = asyncio.ensure_future(self._run_all(list(self.requests.values())))
        result = (await asyncio.shield(self.task))[request.id]
        if isinstance(result, BaseException):
            raise result
        return result

    async def _run_all(self, requests: list[Request]) -> dict[str, Any]:
        self.submitted = True
        results: dict[str, Any] = {
            r.id: Response(id=r.id, finish_reason=FinishReason.CANCELLED)
            for r in requests
            if r.id in self.cancelled
        }
        requests = [r for r in requests if r.id not in results]
        if not requests:
            return results
        many = getattr(self.engine, "agenerate_many", None)
        try:
            if many is not None:
                answers: list[Any] = list(await many(requests))
            else:
                answers = await asyncio.gather(
                    *(self.engine.agenerate(r) for r in requests), return_exceptions=True
                )
        except Exception as exc:  # each exchange records the failure on its turn
            answers = [exc] * len(requests)
        results.update({r.id: res for r, res in zip(requests, answers, strict=True)})
        return results

    def leave(self) -> None:
        """An exchange that ends without reaching the engine must not hold the others."""
        self.n -= 1
        self._check()


class Exchange:
    """One run of the reply loop for one cursor (see the module docstring)."""

    def __init__(
        self,
        cursor: Cursor,
        on_event: EventCallback | None,
        overrides: dict[str, Any],
        gate: Gate | None = None,
    ) -> None:
        self.gate = gate
        self.round_results: list[ToolResult] = []
        self.cur = cursor
        self.ctx = cursor.context
        self.session = self.ctx.session
        self.on_event = on_event if on_event is not None else self.ctx.on_event
        self.overrides = overrides
        self.stream = self.on_event is not None

    async def emit(self, kind: EventKind, **fields: Any) -> None:
        await deliver(self.on_event, Event(kind=kind, **fields))

    def params(self, state: EffectiveState) -> dict[str, Any]:
        out: dict[str, Any] = dict(RUNNER_DEFAULTS)
        out.update(state.params)
        for layer in (self.cur.overrides, self.overrides):
            for name, value in layer.items():
                if value is None:
                    out.pop(name, None)
                else:
                    out[name] = value
        return out

    def view(self, state: EffectiveState) -> Any:
        tb = self.ctx.toolbox
        return tb.view(list(state.tool_scopes)) if tb is not None else None

    def request(self, at: str, *, continue_final: bool = False) -> Request:
        """The engine request for a reply after node ``at``."""
        state = self.session.state_at(at)
        params = self.params(state)
        tools = None
        if self.ctx.toolbox is not None:
            specs = self.ctx.toolbox.specs(self.view(state))
            tools = specs or None
        fields = {k: params[k] for k in REQUEST_PARAMS if k in params}
        messages = self.session.messages(at)
        if continue_final and (not messages or messages[-1].get("role") != "assistant"):
            # The reply being continued showed no text yet (only reasoning), so the
            # history has no assistant message for it: continue from an empty one.
            messages.append({"role": "assistant", "content": ""})
        return Request(
            messages=messages,
            adapters=state.adapters,
            tools=tools,
            continue_final=continue_final,
            **fields,
        )

    async def generate(
        self, request: Request, *, continuation: bool, auto: bool
    ) -> tuple[Turn, bool]:
        """Run one request; return the assistant turn and whether the task was cancelled."""
        engine = self.ctx.engine
        text: list[str] = []
        reasoning: list[str] = []
        self.cur._request_id = request.id
        await self.emit(EventKind.REQUEST, request_id=request.id)
        gate, self.gate = self.gate, None
        self.cur._gate = gate
        base = Turn(
            role=Role.ASSISTANT, continuation=continuation, auto=auto, request_id=request.id
        )
        try:
            if gate is not None and not self.stream:
                response = await gate.generate(request)
            elif self.stream and gate is not None and await gate.arrive(request.id):
                response = Response(id=request.id, finish_reason=FinishReason.CANCELLED)
            elif self.stream:
                response = None
                async for chunk in engine.astream(request):
                    if chunk.reasoning:
                        reasoning.append(chunk.reasoning)
                        await self.emit(
                            EventKind.REASONING, text=chunk.reasoning, request_id=request.id
                        )
                    if chunk.text:
                        text.append(chunk.text)
                        await self.emit(EventKind.TEXT, text=chunk.text, request_id=request.id)
                    if chunk.tool_call is not None:
                        await self.emit(
                            EventKind.TOOL_CALL, tool_call=chunk.tool_call, request_id=request.id
                        )
                    if chunk.done:
                        response = chunk.response
                if response is None:
                    raise RuntimeError("the engine's stream ended without a final chunk")
            else:
                response = await engine.agenerate(request)
        except asyncio.CancelledError:
            engine.cancel(request.id)
            turn = attrs.evolve(
                base,
                text="".join(text),
                reasoning="".join(reasoning),
                finish_reason=FinishReason.CANCELLED,
                cancelled=True,
            )
            return turn, True
        except Exception as exc:  # an engine failure is recorded, never raised
            turn = attrs.evolve(
                base,
                text="".join(text),
                reasoning="".join(reasoning),
                finish_reason=FinishReason.ERROR,
                error=f"engine failed: {type(exc).__name__}: {exc}",
            )
            return turn, False
        finally:
            self.cur._request_id = None
            self.cur._gate = None
        return self.from_response(base, response), False

    @staticmethod
    def from_response(base: Turn, resp: Response) -> Turn:
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

    async def run_tools(
        self, calls: tuple[ToolCall, ...], at: str, budget: BudgetState
    ) -> list[ToolResult]:
        tb = self.ctx.toolbox
        view = self.view(self.session.state_at(at))
        results = self.round_results = []
        for call in calls:
            try:
                result = await tb.aexecute(call, view, approval=self.ctx.approval, budget=budget)
            except Exception as exc:  # the toolbox should not raise; never lose a call if it does
                result = ToolResult(
                    name=call.name,
                    content=f"tool {call.name} failed: {type(exc).__name__}: {exc}",
                    call_id=call.id,
                    is_error=True,
                )
            if result.call_id is None:
                result = attrs.evolve(result, call_id=call.id)
            results.append(result)
            await self.emit(EventKind.TOOL_RESULT, tool_result=result)
        return results

    def record(self, at: str, turn: Turn) -> str:
        node = self.session.append(at, NodeKind.TURN, turn)
        self.cur._move(node.id)
        return node.id

    def _budget(self, params: dict[str, Any]) -> BudgetState:
        budget = ToolBudget(
            max_calls=params["max_tool_calls"], max_rounds=params["max_tool_rounds"]
        )
        return budget.start()

    async def run(self, at: str, *, continue_first: bool = False, first_auto: bool = False) -> Turn:
        """The reply loop from node ``at``; returns the final assistant turn (stitched)."""
        try:
            return await self._loop(at, continue_first=continue_first, first_auto=first_auto)
        finally:
            if self.gate is not None:
                self.gate.leave()

    async def _loop(self, at: str, *, continue_first: bool, first_auto: bool) -> Turn:
        params = self.params(self.session.state_at(at))
        budget = self._budget(params)
        rounds = continuations = 0
        continuing, auto = continue_first, first_auto
        last_reply = None
        while True:
            request = self.request(at, continue_final=continuing)
            turn, task_cancelled = await self.generate(request, continuation=continuing, auto=auto)
            auto = True
            calls = turn.tool_calls if not (turn.cancelled or turn.error) else ()
            at = last_reply = self.record(at, turn)
            await self.emit(EventKind.TURN, node_id=at, turn=turn)
            if task_cancelled:
                raise asyncio.CancelledError
            if turn.cancelled or turn.error is not None:
                break
            if turn.truncated and not calls and continuations < params["max_continuations"]:
                continuations += 1
                continuing = True
                continue
            continuing = False
            if not calls:
                break
            self.round_results = []
            try:
                results, go_on = await self.tool_round(calls, at, budget, rounds, params)
            except asyncio.CancelledError:
                # Keep the tree well formed: every call gets a result, done or cancelled.
                done = list(self.round_results)
                done += [
                    ToolResult(name=c.name, content="cancelled", call_id=c.id, is_error=True)
                    for c in calls[len(done) :]
                ]
                self.record(at, Turn(role=Role.TOOL, tool_results=tuple(done), auto=True))
                raise
            rounds += 1
            tool_turn = Turn(role=Role.TOOL, tool_results=tuple(results), auto=True)
            at = self.record(at, tool_turn)
            await self.emit(EventKind.TURN, node_id=at, turn=tool_turn)
            if not go_on:
                break
        final = stitched(self.session, last_reply)
        await self.emit(EventKind.DONE, node_id=last_reply, turn=final)
        return final

    async def tool_round(
        self,
        calls: tuple[ToolCall, ...],
        at: str,
        budget: BudgetState,
        rounds: int,
        params: dict[str, Any],
    ) -> tuple[list[ToolResult], bool]:
        """Execute one round; return the results and whether to generate again."""
        limit = params["max_tool_rounds"]
        refusal = None
        if self.ctx.toolbox is None:
            refusal = (
                "not executed: no toolbox is attached to this context (ChatContext(toolbox=...))"
            )
        elif rounds >= limit:
            refusal = (
                f"not executed: this turn reached its limit of {limit} tool rounds "
                "(raise it with cursor.params.set(max_tool_rounds=...))"
            )
        if refusal is not None:
            results = [
                ToolResult(name=c.name, content=refusal, call_id=c.id, is_error=True) for c in calls
            ]
            for r in results:
                await self.emit(EventKind.TOOL_RESULT, tool_result=r)
            return results, False
        budget.start_round()
        return await self.run_tools(calls, at, budget), True
