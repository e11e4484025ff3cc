# SPDX-License-Identifier: MIT
"""Tool commands: list, global modes, branch scopes, approval policies and risk.

``/tools mode`` changes a tool's *global* mode in the toolbox (all branches);
``/tools scope`` records a scope layer on *this branch* (a command on the node,
so other branches are unaffected and replay repeats it). Approval and risk are
toolbox settings; an ``always``/``never`` answer given at an approval prompt is
remembered by the toolbox and shown here (``/tools approval NAME forget`` drops it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mp13_toolbox import Approval, Risk, ToolMode, ToolsScope
from mp13chat import _convo as convo
from mp13chat import _render as render
from mp13chat._errors import UsageError
from mp13chat._registry import Command, CommandLine, command, group_command

if TYPE_CHECKING:  # pragma: no cover
    from mp13chat._app import ChatApp

MODES = [m.value for m in ToolMode]
POLICIES = [p.value for p in Approval] + ["default", "forget"]
RISKS = [r.value for r in Risk]


def _tool_names(app: ChatApp) -> list[str]:
    return app.toolbox.names() if app.toolbox is not None else []


def _complete_name_then(values: list[str]):
    def complete(app: ChatApp, index: int, words: list[str]) -> list[str]:
        return _tool_names(app) if index == 0 else values if index == 1 else []

    return complete


def _complete_assignments(app: ChatApp, index: int, words: list[str]) -> list[str]:
    return [f"{name}={mode}" for name in [*_tool_names(app), "*"] for mode in MODES]


@command("list", group="tools", usage="/tools list")
def tools_list(app: ChatApp, line: CommandLine) -> None:
    """List the tools: global mode, mode on this branch, risk, approval, description."""
    tb = app.toolbox
    view = convo.tools_view(app)
    remembered = tb.remembered()
    defaults = tb.approval_defaults
    rows = []
    for info in tb.list():
        here = view.mode(info.name)
        approval = info.approval.value if info.approval else f"{defaults[info.risk].value} (risk)"
        if info.name in remembered:
            approval += f", {remembered[info.name].value} remembered"
        rows.append(
            (
                info.name,
                info.mode.value,
                here.value if here else "unavailable",
                info.risk.value,
                approval,
                info.description.splitlines()[0] if info.description else "",
            )
        )
    app.console.print(
        render.table("tools", ("name", "global", "here", "risk", "approval", "description"), rows)
    )


@command(
    "mode",
    group="tools",
    usage="/tools mode NAME|PATTERN advertised|silent|disabled",
    complete=_complete_name_then(MODES),
)
def tools_mode(app: ChatApp, line: CommandLine) -> None:
    """Set a tool's global mode (every branch); a pattern like 'calc*' sets several."""
    words = line.words
    if len(words) != 2:
        raise UsageError("give a tool name (or pattern) and a mode")
    changed = app.toolbox.set_mode(words[0], words[1])
    render.print_ok(app.console, f"{', '.join(changed)}: {words[1]} (global)")


def _scope(words: list[str]) -> ToolsScope:
    modes = {}
    for word in words:
        name, sep, mode = word.partition("=")
        if not sep or not name or not mode:
            raise UsageError(f"write scope entries as NAME=MODE (e.g. '*=silent'), got {word!r}")
        modes[name] = mode
    try:
        return ToolsScope(modes)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


@command(
    "add",
    group="tools",
    usage="/tools scope add NAME=MODE ...",
    complete=_complete_assignments,
)
def scope_add(app: ChatApp, line: CommandLine) -> None:
    """Add a scope layer on this branch, e.g. '*=silent calculator=advertised'."""
    words = line.words
    if not words:
        raise UsageError("give at least one NAME=MODE entry")
    app.cursor.tools.add(_scope(words))
    tools_list.func(app, CommandLine())


@command(
    "set",
    group="tools",
    usage="/tools scope set NAME=MODE ...",
    complete=_complete_assignments,
)
def scope_set(app: ChatApp, line: CommandLine) -> None:
    """Replace this branch's scope layers with one layer."""
    app.cursor.tools.set(_scope(line.words))
    tools_list.func(app, CommandLine())


@command("pop", group="tools", usage="/tools scope pop")
def scope_pop(app: ChatApp, line: CommandLine) -> None:
    """Undo the last scope change on this branch."""
    app.cursor.tools.pop()
    tools_list.func(app, CommandLine())


@command("reset", group="tools", usage="/tools scope reset")
def scope_reset(app: ChatApp, line: CommandLine) -> None:
    """Drop every scope layer on this branch: tools in their global modes."""
    app.cursor.tools.reset()
    tools_list.func(app, CommandLine())


@command("show", group="tools", usage="/tools scope show")
def scope_show(app: ChatApp, line: CommandLine) -> None:
    """Show the scope layers in effect on this branch, first to last."""
    scopes = convo.tool_scopes(app)
    if not scopes:
        render.print_info(app.console, "no scope layers: every tool in its global mode")
        return
    rows = [
        (i + 1, " ".join(f"{k}={v.value}" for k, v in s.modes.items()), s.label)
        for i, s in enumerate(scopes)
    ]
    app.console.print(render.table("tool scopes here", ("#", "modes", "label"), rows))


SCOPE = group_command(
    "scope",
    scope_show,
    scope_add,
    scope_set,
    scope_pop,
    scope_reset,
    group="tools",
    doc="Tool scope layers on this branch (later layers win).",
    default="show",
)


@command(
    "approval",
    group="tools",
    usage="/tools approval NAME allow|deny|ask|default|forget",
    complete=_complete_name_then(POLICIES),
)
def tools_approval(app: ChatApp, line: CommandLine) -> None:
    """Set a tool's approval policy; 'default' = by risk, 'forget' = drop always/never."""
    words = line.words
    if len(words) != 2:
        raise UsageError("give a tool name and a policy")
    name, policy = words
    if policy == "forget":
        app.toolbox.remember(name, None)
        render.print_ok(app.console, f"{name}: remembered answer forgotten")
        return
    try:
        app.toolbox.set_approval(name, None if policy == "default" else policy)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    render.print_ok(app.console, f"{name}: approval {policy}")


@command(
    "risk",
    group="tools",
    usage="/tools risk NAME low|medium|high",
    complete=_complete_name_then(RISKS),
)
def tools_risk(app: ChatApp, line: CommandLine) -> None:
    """Set a tool's risk level (picks its default approval policy)."""
    words = line.words
    if len(words) != 2:
        raise UsageError("give a tool name and a risk level")
    try:
        app.toolbox.set_risk(words[0], words[1])
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    render.print_ok(app.console, f"{words[0]}: risk {words[1]}")


TOOLS = group_command(
    "tools",
    tools_list,
    tools_mode,
    SCOPE,
    tools_approval,
    tools_risk,
    group="tools",
    doc="Tools: list, global modes, scope layers on this branch, approval and risk.",
    default="list",
)

COMMANDS: tuple[Command, ...] = (TOOLS,)
