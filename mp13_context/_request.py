# SPDX-License-Identifier: MIT
"""The engine ``Request`` for the next reply from a node: pure functions, no cursor.

``request_at`` turns a node's effective settings, its rendered messages and the
tool specs its scope layers advertise into a ``Request``; ``run_params`` layers
the parameters (runner defaults, then those set on the path, then overrides). The cursor
(``Cursor.request``) and the turn runner both build requests here, so what a
cursor shows is what the runner sends.

Override values of ``None`` put a parameter back to its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mp13_context._errors import CursorError
from mp13_context._settings import (
    REQUEST_PARAMS,
    RUNNER_DEFAULTS,
    EffectiveSettings,
    changed_params,
)
from mp13_context._text import scrub
from mp13_engine import Request
from mp13_toolbox import Toolbox, ToolsView

if TYPE_CHECKING:  # pragma: no cover
    from mp13_context._session import Session


def run_params(settings: EffectiveSettings, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Runner defaults, then the parameters set on the path, then ``overrides``."""
    return changed_params({**RUNNER_DEFAULTS, **settings.params}, overrides)


def tool_view(toolbox: Toolbox, settings: EffectiveSettings) -> ToolsView:
    """The toolbox's view under the path's scope layers."""
    return toolbox.view(list(settings.tool_scopes))


def request_at(
    session: Session,
    toolbox: Toolbox | None,
    node_id: str,
    overrides: Mapping[str, Any],
    *,
    continue_final: bool = False,
    ask: str | None = None,
) -> Request:
    """The request for the next reply after node ``node_id``: the path's messages under
    its effective settings, the tools its scope layers advertise (none without a
    toolbox) and the parameters ``run_params`` gives (only the ``Request`` fields
    among them are used).

    With ``continue_final`` the last message is the assistant reply to go on with;
    a reply that showed no text yet (only reasoning) has no message, so it
    continues from an empty one. With ``ask`` it is the reply to that user message
    (what ``Cursor.ask(ask)`` would send). A node with no message yet (no system
    message, no turn) and no ``ask`` has nothing to reply to: ``CursorError``.
    """
    settings = session.settings_at(node_id)
    messages = session.messages(node_id)
    if ask is not None:
        messages = [*messages, {"role": "user", "content": scrub(ask)}]
    if not messages and not continue_final:
        raise CursorError(
            "there is nothing to reply to here yet (no system message and no turn); "
            "give the next user message, e.g. cursor.request('hi') or cursor.prompt('hi')"
        )
    if continue_final and (not messages or messages[-1].get("role") != "assistant"):
        messages = [*messages, {"role": "assistant", "content": ""}]
    params = run_params(settings, overrides)
    tools = toolbox.specs(tool_view(toolbox, settings)) if toolbox is not None else None
    return Request(
        messages=messages,
        adapters=settings.adapters,
        tools=tools or None,
        continue_final=continue_final,
        **{name: params[name] for name in REQUEST_PARAMS if name in params},
    )
