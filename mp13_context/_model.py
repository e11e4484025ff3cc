# SPDX-License-Identifier: MIT
"""The conversation tree's values: nodes, turns and commands.

A session holds conversations; a conversation is a tree of ``Node``s under one
``ROOT`` node. A node is either a *turn* (``kind=TURN``, ``turn`` set: a user
message, an assistant reply, or the tool results of one round) or a
*structural* node (``ROOT``, ``FORK_HUB``, ``BATCH_HUB``, ``PLACEHOLDER``)
that only groups children or carries commands.

Invariants:

- The tree is append-only. Nodes are never deleted or moved; the only changes
  to an existing node are its flags (``archived``, ``main_line``) and appending
  commands to a node that has no children yet (so no descendant's state moves).
- ``Node.commands`` are applied in order *after* the node, so they affect the
  node's whole subtree and nothing else: branches never leak into each other.
- Every value here is frozen; the session hands out new values on change.
"""

from __future__ import annotations

import enum
import time
import uuid
from typing import Any

import attrs

from mp13_engine import FinishReason, RequestMetrics
from mp13_toolbox import ToolCall, ToolResult, ToolsScope


def new_id() -> str:
    """A fresh node / conversation id (16 hex chars, globally unique in practice)."""
    return uuid.uuid4().hex[:16]


class NodeKind(str, enum.Enum):
    """What a node is: a turn or one of the structural kinds."""

    ROOT = "root"
    TURN = "turn"
    FORK_HUB = "fork_hub"
    BATCH_HUB = "batch_hub"
    PLACEHOLDER = "placeholder"


class Role(str, enum.Enum):
    """Who produced a turn. ``TOOL`` turns hold the results of one tool round."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class CommandKind(str, enum.Enum):
    """Commands recorded on nodes. See ``Command`` for the fields each one uses."""

    SYSTEM_SET = "system.set"  # text
    SYSTEM_ADD = "system.add"  # text (appended as a new paragraph)
    SYSTEM_NONE = "system.none"  # no system message at all
    SYSTEM_DEFAULT = "system.default"  # back to the chat template's default
    SYSTEM_POP = "system.pop"  # undo the last system command on this path
    ADAPTERS_SET = "adapters.set"  # names (empty = base model)
    ADAPTERS_ADD = "adapters.add"  # names
    ADAPTERS_DEFAULT = "adapters.default"  # back to the engine's default adapters
    ADAPTERS_POP = "adapters.pop"  # undo the last adapters command
    TOOLS_SET = "tools.set"  # scope (replaces all layers)
    TOOLS_ADD = "tools.add"  # scope (one more layer on top)
    TOOLS_RESET = "tools.reset"  # no layers: every tool in its global mode
    TOOLS_POP = "tools.pop"  # undo the last tools command
    PARAMS_SET = "params.set"  # params (a value of None restores the default)
    LOG = "log"  # text: a note for people, never sent to a model
    API_CALL = "api_call"  # text (the call's name) + data: a recorded API call

    @property
    def changes_settings(self) -> bool:
        """Whether it can change the effective settings (all but notes and API calls).
        These are the commands ``replay`` re-applies and ``trim`` keeps."""
        return self not in (CommandKind.LOG, CommandKind.API_CALL)


def as_tuple(value: Any) -> tuple[Any, ...]:
    """A converter: None -> (), one string -> (it,), any other iterable -> a tuple."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if value else {}


@attrs.frozen(kw_only=True)
class Command:
    """One command recorded on a node.

    ``text`` is used by system and log commands and names an API call; ``names``
    by adapter commands; ``scope`` (a ``mp13_toolbox.ToolsScope``) by
    ``TOOLS_SET``/``TOOLS_ADD``; ``params`` by ``PARAMS_SET``; ``data`` holds the
    arguments of a recorded API call.
    """

    kind: CommandKind
    text: str | None = None
    names: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    scope: ToolsScope | None = None
    params: dict[str, Any] = attrs.field(factory=dict, converter=_dict, hash=False)
    data: dict[str, Any] = attrs.field(factory=dict, converter=_dict, hash=False)
    created_at: float = attrs.field(factory=time.time, eq=False)


@attrs.frozen(kw_only=True)
class Turn:
    """The data of one turn node.

    ``USER``: ``text``. ``ASSISTANT``: ``text`` (content without tool-call markup),
    ``reasoning``, ``tool_calls``, ``finish_reason``, ``metrics``; ``truncated``
    when it stopped at the token limit, ``cancelled`` when it was cancelled
    (the partial text is kept), ``continuation`` when it continues the assistant
    turn before it (the model sees both as one message). ``TOOL``:
    ``tool_results`` of one round. ``auto`` marks turns the runner made by itself
    (tool results, continuations, replies after a tool round): replay regenerates
    them instead of copying. ``error`` records an engine or tool failure; it
    never raises.

    ``node_id`` is filled in on the values the cursor API returns (where the turn
    was recorded) and is not stored. ``parse_errors`` keeps what the engine's
    tool-call parser could not read (the text is kept as content).
    """

    role: Role
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=as_tuple)
    tool_results: tuple[ToolResult, ...] = attrs.field(default=(), converter=as_tuple)
    finish_reason: FinishReason | None = None
    metrics: RequestMetrics | None = None
    truncated: bool = False
    cancelled: bool = False
    continuation: bool = False
    auto: bool = False
    error: str | None = None
    parse_errors: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    request_id: str | None = None
    node_id: str | None = attrs.field(default=None, eq=False)

    @property
    def ok(self) -> bool:
        """True unless an error was recorded on this turn."""
        return self.error is None


@attrs.frozen(kw_only=True)
class Node:
    """One node of a conversation tree (see the module docstring).

    ``hash`` is the SHA-256 (hex) of the node's content and its parent's hash,
    set when the node is stored; ``Session.verify`` recomputes it to find nodes
    altered outside mp13 (see ``_integrity``).
    """

    id: str
    conversation_id: str
    parent_id: str | None
    kind: NodeKind
    depth: int = 0
    seq: int = 0
    turn: Turn | None = None
    commands: tuple[Command, ...] = attrs.field(default=(), converter=as_tuple)
    archived: bool = False
    main_line: bool = False
    label: str = ""
    created_at: float = attrs.field(factory=time.time)
    hash: str = ""

    @property
    def is_turn(self) -> bool:
        """Whether this node holds a turn (``kind`` is ``TURN``), not a structural node."""
        return self.kind is NodeKind.TURN


@attrs.frozen(kw_only=True)
class ConversationInfo:
    """A conversation's header: id, title, its root node and the last node appended."""

    id: str
    root_id: str
    title: str = ""
    head_id: str | None = None
    created_at: float = attrs.field(factory=time.time)


@attrs.frozen(kw_only=True)
class SavedPosition:
    """Where a scope (a ``ChatContext``'s name) was in a conversation: the node a cursor
    of that scope resumes at (``Session.save_position``, ``Session.resume_point``)."""

    scope: str
    node_id: str


@attrs.frozen(kw_only=True)
class SearchHit:
    """One full-text search match: where it is and a snippet with the match in ``[...]``."""

    conversation_id: str
    node_id: str
    snippet: str
    role: Role
    score: float = 0.0
    title: str = ""
