# SPDX-License-Identifier: MIT
"""mp13_context: conversations as trees you can fork, retry, save, search and replay.

``Session`` holds conversations (trees of ``Node``s with ``Turn``s and
``Command``s) in SQLite; ``ChatContext`` joins a session with an engine (any
``EngineClient``) and a toolbox; ``Cursor``s navigate, ask, fork, batch, retry
and continue; ``replay`` re-runs a conversation on another engine and reports
the differences. This package never imports torch.
"""

from mp13_context._context import ChatContext
from mp13_context._cursor import Cursor, TryOut
from mp13_context._errors import (
    CommandError,
    ContextError,
    ContextKeywordError,
    CursorError,
    ImportConflictError,
    NotFoundError,
    ReadOnlyError,
    SchemaError,
    SerializationError,
    StoreError,
    TamperedError,
)
from mp13_context._events import Event, EventCallback, EventKind
from mp13_context._export import ConversationData, SessionData
from mp13_context._handles import AdapterCommands, ParamCommands, SystemCommands, ToolCommands
from mp13_context._import import ImportLimits, ImportReport
from mp13_context._integrity import IntegrityProblem, IntegrityReport
from mp13_context._model import (
    Command,
    CommandKind,
    ConversationInfo,
    Node,
    NodeKind,
    Role,
    SavedPosition,
    SearchHit,
    Turn,
)
from mp13_context._protocol import EngineClient
from mp13_context._replay import ReplayProgress, ReplayReport, ReplayTurn, areplay, replay
from mp13_context._session import Session
from mp13_context._settings import PARAMS, EffectiveSettings, SystemMode, SystemPrompt

__all__ = [
    "PARAMS",
    "AdapterCommands",
    "ChatContext",
    "Command",
    "CommandError",
    "CommandKind",
    "ContextError",
    "ContextKeywordError",
    "ConversationData",
    "ConversationInfo",
    "Cursor",
    "CursorError",
    "EffectiveSettings",
    "EngineClient",
    "Event",
    "EventCallback",
    "EventKind",
    "ImportConflictError",
    "ImportLimits",
    "ImportReport",
    "IntegrityProblem",
    "IntegrityReport",
    "Node",
    "NodeKind",
    "NotFoundError",
    "ParamCommands",
    "ReadOnlyError",
    "ReplayProgress",
    "ReplayReport",
    "ReplayTurn",
    "Role",
    "SavedPosition",
    "SchemaError",
    "SearchHit",
    "SerializationError",
    "Session",
    "SessionData",
    "StoreError",
    "SystemCommands",
    "SystemMode",
    "SystemPrompt",
    "TamperedError",
    "ToolCommands",
    "TryOut",
    "Turn",
    "areplay",
    "replay",
]
