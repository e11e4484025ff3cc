# SPDX-License-Identifier: MIT
"""Events the runner reports while a turn runs, for front ends (the REPL, apps).

Pass ``on_event=callback`` (sync or async) to ``ask``/``aask``/``retry``/...,
or iterate ``cursor.astream(text)``. Order for one exchange: ``USER`` (the user
turn was recorded), then per generation ``REQUEST`` (the engine request id, for
cancelling), ``REASONING``/``TEXT`` deltas while streaming, ``TOOL_CALL`` as
calls close, and ``TURN`` when the assistant turn is recorded. A reply with
tool calls is recorded together with its round's results: one ``TOOL_RESULT``
per call as the tools finish, then a ``TURN`` for the reply and one for the
tool turn. Finally ``DONE`` with the final turn. Every node is reported right
after it is recorded and before anything recorded below it, so a front end
can mirror the tree from events alone.

The ``TURN`` event of an assistant reply also carries the engine's ``Response`` it
was recorded from (``response``): what the store does not keep, such as
``Response.logprobs`` (``Request(logprobs=True)``), is had there. ``None`` for user
and tool turns, and for a reply that got no response (the engine raised, or the
task awaiting it was cancelled). A reply continued (``max_continuations``) has one
``TURN``, and one response, per part.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import attrs

from mp13_context._errors import ContextError
from mp13_context._model import Turn
from mp13_engine import Response
from mp13_toolbox import ToolCall, ToolResult


class EventKind(str, enum.Enum):
    """What an ``Event`` reports; the module docstring gives their order in one exchange."""

    USER = "user"
    REQUEST = "request"
    REASONING = "reasoning"
    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TURN = "turn"
    DONE = "done"


@attrs.frozen(kw_only=True)
class Event:
    """One runner event. ``text`` carries deltas; ``turn``/``node_id`` recorded turns;
    ``response`` the engine's response an assistant ``TURN`` was recorded from (see the
    module docstring)."""

    kind: EventKind
    text: str = ""
    node_id: str | None = None
    request_id: str | None = None
    turn: Turn | None = None
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    response: Response | None = None


EventCallback = Callable[[Event], Awaitable[None] | None]


def check_callback(value: object, what: str) -> None:
    """A callback argument (``on_event``, ``approval``) is a callable or None: checked
    before anything is recorded, not when the first event arrives."""
    if value is not None and not callable(value):
        raise ContextError(f"{what} is a function (or None), not {type(value).__name__}")
