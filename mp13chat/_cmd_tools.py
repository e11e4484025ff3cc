# SPDX-License-Identifier: MIT
"""Tool commands: list, global modes, branch scopes, approval policies and risk.

``/tools mode`` changes a tool's *global* mode in the toolbox (all branches): that is
the operator's policy and a ceiling. ``/tools scope`` records a scope layer on *this
branch* (a command on the node, so other branches are unaffected and replay repeats
it); layers only narrow the ceiling: they hide or disable tools, never advertise a tool
whose global mode is silent nor enable a disabled one (a layer that asks for more is
capped, and the command says so and how to widen the global mode). Approval and risk
are toolbox settings; an ``always``/``never`` answer given at an approval prompt is
remembered by the toolbox and shown here (``/tools approval NAME forget`` drops it).
"""

from __future__ import annotations

from collections.abc import Callable

from mp13_toolbox import Approval, Risk, ToolMode, ToolsScope
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._errors import UsageError
from mp13chat._registry import Command, CommandLine, command, group_command, parse_assignments
from mp13chat._repl import Repl

MODES = [m.value for m in ToolMode]
POLICIES = [p.value for p in Approval] + ["default", "forget"]
RISKS = [r.value for r in Risk]


def _complete_name_then(values: list[str]) -> Callable[[Repl, int, list[str]], list[str]]:
    def complete(repl: Repl, index: int, words: list[str]) -> list[str]:
        return repl.toolbox.names() if index == 0 else values if index == 1 else []

    return complete


def _complete_assignments(repl: Repl, index: int, words: list[str]) -> list[str]:
    return [f"{name}={mode}" for name in [*repl.toolbox.names(), "*"] for mode in MODES]


def _print_tools(repl: Repl, new_layer: ToolsScope | None = None) -> None:
    """The tools as they are on this branch; after a new layer, a note on each tool it
    asked more of than the global mode allows (the ceiling capped it)."""
    tb = repl.toolbox
    view = repl.cursor.tools.view()
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
    repl.console.print(
        render.table("tools", ("name", "global", "here", "risk", "approval", "description"), rows)
    )
    if new_layer is None:
        return
    for info in tb.list():
        asked = new_layer.mode_for(info.name)
        if asked is not None and view.mode(info.name) is not asked:
            render.print_warning(
                repl.console,
                f"{info.name} stays {info.mode.value} here, not {asked.value}: scope layers "
                f"only narrow a tool's global mode; /tools mode {info.name} {asked.value} "
                "changes it for every branch",
            )


@command("list", group="tools", usage="/tools list")
def tools_list(repl: Repl, line: CommandLine) -> None:
    """List the tools: global mode, mode on this branch, risk, approval, description."""
    _print_tools(repl)


@command(
    "mode",
    group="tools",
    usage="/tools mode NAME|PATTERN advertised|silent|disabled",
    complete=_complete_name_then(MODES),
)
def tools_mode(repl: Repl, line: CommandLine) -> None:
    """Set a tool's global mode (every branch); a pattern like 'calc*' sets several.

    The global mode is the ceiling of every branch: scope layers can only narrow it."""
    target, mode = line.require_words("a tool name and a mode (or a pattern and a mode)", 2, 2)
    try:  # an unknown MODE: the toolbox's message lists the modes; the usage follows it
        changed = repl.toolbox.set_mode(target, mode)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    render.print_ok(repl.console, f"{', '.join(changed)}: {mode} (global)")


def _scope(line: CommandLine) -> ToolsScope:
    words = line.require_words("at least one NAME=MODE entry")
    modes = parse_assignments(words, "scope entries", "NAME=MODE (e.g. '*=silent')")
    try:  # an empty or unknown MODE: the toolbox's message lists the modes
        return ToolsScope(modes)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


@command(
    "add", group="tools", usage="/tools scope add NAME=MODE ...", complete=_complete_assignments
)
def scope_add(repl: Repl, line: CommandLine) -> None:
    """Add a scope layer on this branch, e.g. '*=silent calculator=advertised'."""
    scope = _scope(line)
    repl.cursor.tools.add(scope)
    _print_tools(repl, scope)


@command(
    "set", group="tools", usage="/tools scope set NAME=MODE ...", complete=_complete_assignments
)
def scope_set(repl: Repl, line: CommandLine) -> None:
    """Replace this branch's scope layers with one layer."""
    scope = _scope(line)
    repl.cursor.tools.set(scope)
    _print_tools(repl, scope)


@command("pop", group="tools", usage="/tools scope pop")
def scope_pop(repl: Repl, line: CommandLine) -> None:
    """Undo the last scope change on this branch."""
    position.require_undo(
        repl.cursor.settings.tools_prev,
        "no scope change on this branch; "
        "/tools scope add NAME=MODE adds a layer, /tools scope reset drops them all",
    )
    repl.cursor.tools.pop()
    _print_tools(repl)


@command("reset", group="tools", usage="/tools scope reset")
def scope_reset(repl: Repl, line: CommandLine) -> None:
    """Drop every scope layer on this branch: tools in their global modes."""
    repl.cursor.tools.reset()
    _print_tools(repl)


@command("show", group="tools", usage="/tools scope show")
def scope_show(repl: Repl, line: CommandLine) -> None:
    """Show the scope layers in effect on this branch, first to last."""
    scopes = repl.cursor.tools.show()
    if not scopes:
        render.print_info(repl.console, "no scope layers: every tool in its global mode")
        return
    rows = [
        (i + 1, " ".join(f"{k}={v.value}" for k, v in s.modes.items()), s.label)
        for i, s in enumerate(scopes)
    ]
    repl.console.print(render.table("tool scopes here", ("#", "modes", "label"), rows))


SCOPE: Command[Repl] = group_command(
    "scope",
    scope_show,
    scope_add,
    scope_set,
    scope_pop,
    scope_reset,
    group="tools",
    doc=(
        "Tool scope layers on this branch (later layers win). A layer only narrows what "
        "the toolbox allows: it can make a tool silent or disabled here, never advertise "
        "a tool whose global mode is silent nor enable a disabled one; /tools mode "
        "changes a tool's global mode for every branch."
    ),
    default="show",
    usage="/tools scope show|add|set|pop|reset ...",
)


@command(
    "approval",
    group="tools",
    usage="/tools approval NAME allow|deny|ask|default|forget",
    complete=_complete_name_then(POLICIES),
)
def tools_approval(repl: Repl, line: CommandLine) -> None:
    """Set a tool's approval policy; 'default' = by risk, 'forget' = drop always/never."""
    name, policy = line.require_words("a tool name and a policy", 2, 2)
    if policy not in POLICIES:  # checked here: the toolbox's message names None, not default
        raise UsageError(f"unknown approval policy {policy!r}; use one of: {', '.join(POLICIES)}")
    if policy == "forget":
        repl.toolbox.remember(name, None)
        render.print_ok(repl.console, f"{name}: remembered answer forgotten")
        return
    repl.toolbox.set_approval(name, None if policy == "default" else policy)
    render.print_ok(repl.console, f"{name}: approval {policy}")


@command(
    "risk",
    group="tools",
    usage="/tools risk NAME low|medium|high",
    complete=_complete_name_then(RISKS),
)
def tools_risk(repl: Repl, line: CommandLine) -> None:
    """Set a tool's risk level (picks its default approval policy)."""
    name, risk = line.require_words("a tool name and a risk level", 2, 2)
    try:
        repl.toolbox.set_risk(name, risk)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    render.print_ok(repl.console, f"{name}: risk {risk}")


TOOLS: Command[Repl] = group_command(
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

COMMANDS: tuple[Command[Repl], ...] = (TOOLS,)
