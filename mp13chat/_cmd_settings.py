# SPDX-License-Identifier: MIT
"""Settings of a branch and of the run: system message, parameters, display settings,
adapters.

System message, adapters-in-use and parameters are *recorded on this branch* through
the cursor (``cur.system``, ``cur.adapters``, ``cur.params``): other branches are not
affected and replay repeats them. Display settings (``stream``, ``markdown``,
``show_reasoning``) belong to this REPL run only. Loading, unloading and saving
adapters act on the engine (every branch sees a loaded adapter; a branch *uses* one
with ``/adapters use``).
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import Any

import attrs
from rich.panel import Panel
from rich.text import Text

from mp13_context import PARAMS, SystemMode
from mp13_engine import AdapterError
from mp13chat import _adapter_folder as adapter_folder
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._completer import complete_paths
from mp13chat._errors import ChatError, UsageError
from mp13chat._registry import Command, CommandLine, command, group_command, parse_value
from mp13chat._repl import Repl

#: REPL display settings handled by /set next to the branch parameters.
DISPLAY_SETTINGS = ("stream", "markdown", "show_reasoning")


# --- system message ------------------------------------------------------------------


def _print_system(repl: Repl, line: CommandLine | None = None) -> None:
    """Show the system message in effect on this branch."""
    prompt = repl.cursor.system.show()
    match prompt.mode:
        case SystemMode.DEFAULT:
            render.print_info(
                repl.console, "no system message set: the chat template's default applies"
            )
        case SystemMode.NONE:
            render.print_info(repl.console, "system message: none (an empty one is sent)")
        case SystemMode.TEXT:
            repl.console.print(Panel(Text(prompt.text), title="system", title_align="left"))


# The other /system subcommands show the message too: the command is the printer itself.
system_show: Command[Repl] = command("show", group="system", usage="/system show")(_print_system)


@command("set", group="system", usage="/system set TEXT")
def system_set(repl: Repl, line: CommandLine) -> None:
    """Replace the system message on this branch."""
    repl.cursor.system.set(line.require_text("the system message"))
    render.print_ok(repl.console, "system message set")


@command("add", group="system", usage="/system add TEXT")
def system_add(repl: Repl, line: CommandLine) -> None:
    """Append a paragraph to the system message on this branch."""
    repl.cursor.system.add(line.require_text("the text to add"))
    _print_system(repl)


@command("pop", group="system", usage="/system pop")
def system_pop(repl: Repl, line: CommandLine) -> None:
    """Undo the last system-message change on this branch."""
    position.require_undo(
        repl.cursor.settings.system_prev,
        "no /system set, add, none or default on this branch; "
        "/system set TEXT sets one, /system default goes back to the template's",
    )
    repl.cursor.system.pop()
    _print_system(repl)


@command("none", group="system", usage="/system none")
def system_none(repl: Repl, line: CommandLine) -> None:
    """Send no system message at all (not even the template's default)."""
    repl.cursor.system.none()
    _print_system(repl)


@command("default", group="system", usage="/system default")
def system_default(repl: Repl, line: CommandLine) -> None:
    """Back to the chat template's default system message."""
    repl.cursor.system.default()
    _print_system(repl)


SYSTEM: Command[Repl] = group_command(
    "system",
    system_show,
    system_set,
    system_add,
    system_pop,
    system_none,
    system_default,
    group="settings",
    doc="The system message on this branch: set, add, pop, none, default, show.",
    default="show",
)

# --- parameters and display settings ---------------------------------------------------


def _complete_settings(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index == 0:
        return [*sorted(PARAMS), *DISPLAY_SETTINGS]
    if index == 1 and words and words[0] in (*DISPLAY_SETTINGS, "do_sample"):
        return ["on", "off"]
    return []


@command("params", group="settings", aliases=("settings",))
def params(repl: Repl, line: CommandLine) -> None:
    """Show the parameters set on this branch and the display settings."""
    rows: list[tuple[str, Any, str]] = [
        (name, value, "branch") for name, value in sorted(repl.cursor.params.show().items())
    ]
    rows += [(name, getattr(repl.config, name), "display") for name in DISPLAY_SETTINGS]
    repl.console.print(render.table("settings", ("name", "value", "where"), rows))
    render.print_info(
        repl.console, "unset parameters use the engine's defaults; /set NAME VALUE changes one"
    )


@command("set", group="settings", usage="/set NAME VALUE", complete=_complete_settings)
def set_(repl: Repl, line: CommandLine) -> None:
    """Set a parameter on this branch (max_new_tokens, temperature, do_sample, top_p,
    min_p, seed, stop, max_tool_rounds, ...) or a display setting (stream, markdown,
    show_reasoning). Values are JSON (true, 0.7, ["a", "b"]) or on/off."""
    name, _, raw = line.text.partition(" ")
    if not name or not raw.strip():
        raise UsageError("give a name and a value")
    value = parse_value(raw)
    if name in DISPLAY_SETTINGS:
        if not isinstance(value, bool):
            raise UsageError(f"{name} is on or off, got {raw.strip()!r}")
        display: dict[str, Any] = {name: value}
        repl.config = attrs.evolve(repl.config, **display)
    else:
        repl.cursor.params.set(**{name: value})
    render.print_ok(repl.console, f"{name} = {value!r}")


@command("unset", group="settings", usage="/unset NAME", complete=_complete_settings)
def unset(repl: Repl, line: CommandLine) -> None:
    """Restore a parameter's default on this branch, or a display setting's value from
    the config the run started with."""
    name = line.require_text("a parameter name")
    if name in DISPLAY_SETTINGS:
        # /set takes display settings too (and Tab offers them here): undo that. The
        # start config, not the file: a wrapper app's own config reads no file.
        value = getattr(repl.start_config, name)
        display: dict[str, Any] = {name: value}
        repl.config = attrs.evolve(repl.config, **display)
        render.print_ok(repl.console, f"{name} back to the config's {'on' if value else 'off'}")
        return
    repl.cursor.params.set(**{name: None})
    render.print_ok(repl.console, f"{name} back to its default")


# --- adapters --------------------------------------------------------------------------


def _manager(repl: Repl) -> Any:  # mp13_engine does not export the manager's type
    return repl.real_engine("adapters").adapters


def _adapter_names(repl: Repl, index: int, words: list[str]) -> list[str]:
    return [a.name for a in _manager(repl).list()]


def _print_in_use(repl: Repl, *, changed: bool = True) -> None:
    """``this branch uses ...``: the adapters in effect here, in words."""
    here = repl.cursor.adapters.show()
    what = "the engine's default adapters" if here is None else ", ".join(here) or "the base model"
    (render.print_ok if changed else render.print_info)(repl.console, f"this branch uses {what}")


@command("list", group="adapters", usage="/adapters list")
def adapters_list(repl: Repl, line: CommandLine) -> None:
    """List the loaded adapters; marks those used on this branch and the engine default."""
    manager = _manager(repl)
    here = repl.cursor.adapters.show()
    defaults = tuple(manager.defaults)
    in_use = defaults if here is None else here
    rows = []
    for info in manager.list():
        marks = []
        if info.name in in_use:
            marks.append("here")
        if info.name in defaults:
            marks.append("default")
        rows.append(
            (
                info.name,
                ", ".join(marks),
                info.rank,
                info.source,
                ", ".join(info.targets),
                info.path,
            )
        )
    if rows:
        columns = ("name", "used", "rank", "source", "targets", "path")
        repl.console.print(render.table("adapters", columns, rows))
    else:  # an empty table's headers said nothing of how to get one
        render.print_info(
            repl.console,
            "no adapters loaded; /train start NAME FILE trains one, /adapters load PATH|NAME "
            "loads a PEFT adapter folder",
        )
    _print_in_use(repl, changed=False)


def _complete_load(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index != 0:
        return []
    saved = []
    folder = repl.adapters_dir
    if folder is not None and folder.is_dir():
        saved = sorted(p.name for p in folder.iterdir() if adapter_folder.is_adapter(p))
    return [*saved, *complete_paths(repl, index, words)]


@command("load", group="adapters", usage="/adapters load PATH|NAME [NAME]", complete=_complete_load)
async def adapters_load(repl: Repl, line: CommandLine) -> None:
    """Load a PEFT LoRA adapter folder into the engine (name: the folder's name).

    A bare NAME loads the adapter saved under that name in the adapters folder (where
    /train saves; every adapter there made for this model loads at start anyway)."""
    words = line.require_words("the adapter folder and optionally a name", 1, 2)
    manager = _manager(repl)
    path = adapter_folder.resolve(words[0], repl.adapters_dir)
    if not adapter_folder.is_adapter(Path(path).expanduser()):
        where = f" and none named so in {repl.adapters_dir}" if repl.adapters_dir else ""
        raise ChatError(
            f"{words[0]!r} is not an adapter folder (one holding adapter_config.json){where}; "
            "give the folder of a PEFT adapter, or the name of one that /train start saved"
        )
    name = words[1] if len(words) > 1 else manager.resolve_path(path).name
    if name in manager:
        # The engine's message offers replace=True, which the REPL cannot pass.
        raise ChatError(
            f"an adapter named {name!r} is already loaded; /adapters use {name} uses it, "
            f"/adapters load {words[0]} NEWNAME loads another copy, /adapters unload {name} "
            "then load reloads it"
        )
    info = await asyncio.to_thread(manager.load, path, words[1] if len(words) > 1 else None)
    render.print_ok(
        repl.console, f"loaded {info.name} (rank {info.rank}); /adapters use {info.name}"
    )


@command("unload", group="adapters", usage="/adapters unload NAME", complete=_adapter_names)
async def adapters_unload(repl: Repl, line: CommandLine) -> None:
    """Remove an adapter from the engine (queued requests naming it fail)."""
    name = line.require_text("an adapter name")
    position.require_adapters(repl, [name])
    await asyncio.to_thread(_manager(repl).unload, name)
    render.print_ok(repl.console, f"unloaded {name}")


def _complete_save(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index == 0:
        return _adapter_names(repl, index, words)
    return complete_paths(repl, index, words) if index == 1 else ["overwrite"] if index == 2 else []


@command(
    "save", group="adapters", usage="/adapters save NAME PATH [overwrite]", complete=_complete_save
)
async def adapters_save(repl: Repl, line: CommandLine) -> None:
    """Save an adapter in plain PEFT format. A folder holding another saved adapter is
    kept unless 'overwrite' asks to replace it (the adapter's own folder is always fine)."""
    words = line.require_words("the adapter name and a folder", 2, 3)
    if len(words) == 3 and words[2] != "overwrite":
        raise UsageError(f"the third word can only be 'overwrite', got {words[2]!r}")
    position.require_adapters(repl, words[:1])
    try:
        path = await asyncio.to_thread(
            _manager(repl).save, words[0], words[1], overwrite=len(words) == 3
        )
    except AdapterError as exc:
        if "overwrite=True" not in str(exc):
            raise
        # The engine's advice is Python; say it as the REPL word.
        raise ChatError(
            f"{words[1]!r} holds another saved adapter, so nothing was written; pick a new "
            f"folder, or /adapters save {words[0]} {shlex.quote(words[1])} overwrite"
        ) from exc
    render.print_ok(repl.console, f"saved {words[0]} to {path}")


@command("use", group="adapters", usage="/adapters use NAME ...", complete=_adapter_names)
def adapters_use(repl: Repl, line: CommandLine) -> None:
    """Use exactly these adapters on this branch (several are combined)."""
    names = line.require_words("adapter names (/adapters base for none)")
    position.require_adapters(repl, names)
    repl.cursor.adapters.set(names)
    _print_in_use(repl)


@command("add", group="adapters", usage="/adapters add NAME ...", complete=_adapter_names)
def adapters_add(repl: Repl, line: CommandLine) -> None:
    """Add adapters to those used on this branch."""
    names = line.require_words("adapter names")
    position.require_adapters(repl, names)
    repl.cursor.adapters.add(names)
    _print_in_use(repl)


@command("base", group="adapters", usage="/adapters base")
def adapters_base(repl: Repl, line: CommandLine) -> None:
    """Use the base model (no adapter) on this branch."""
    repl.cursor.adapters.set([])
    _print_in_use(repl)


@command("default", group="adapters", usage="/adapters default")
def adapters_default(repl: Repl, line: CommandLine) -> None:
    """Use the engine's default adapters on this branch."""
    repl.cursor.adapters.default()
    _print_in_use(repl)


@command("pop", group="adapters", usage="/adapters pop")
def adapters_pop(repl: Repl, line: CommandLine) -> None:
    """Undo the last adapter change on this branch."""
    position.require_undo(
        repl.cursor.settings.adapters_prev,
        "no /adapters use, add, base or default on this branch; /adapters use NAME picks adapters",
    )
    repl.cursor.adapters.pop()
    _print_in_use(repl)


ADAPTERS: Command[Repl] = group_command(
    "adapters",
    adapters_list,
    adapters_load,
    adapters_unload,
    adapters_save,
    adapters_use,
    adapters_add,
    adapters_base,
    adapters_default,
    adapters_pop,
    group="adapters",
    doc="LoRA adapters: load/unload/save in the engine; use/add/base/default/pop on this branch.",
    default="list",
)

COMMANDS: tuple[Command[Repl], ...] = (SYSTEM, params, set_, unset, ADAPTERS)
