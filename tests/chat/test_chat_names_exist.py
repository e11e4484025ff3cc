# SPDX-License-Identifier: MIT
"""Every slash command and command-line flag that mp13chat names in a message or a help
text exists (issue 12: a startup failure pointed at a command that no longer exists).

The strings are read from the package's source with ``ast`` — messages, f-strings,
docstrings — so a new message is checked the moment it is written."""

from __future__ import annotations

import ast
import pathlib
import re

import mp13chat
from mp13chat._cli import build_parser
from mp13chat._commands import builtin_commands
from mp13chat._errors import UnknownCommandError
from mp13chat._registry import CommandRegistry

PACKAGE = pathlib.Path(mp13chat.__file__).parent
# "/name" or "/name sub" not inside a path or a word ("tok/s", "~/.config/mp13", "//x").
COMMAND = re.compile(r"(?<![\w/.~])/([a-z][a-z_]*)(?: ([a-z][a-z_]*))?")
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")
# Words that stand for a command in the docs, not a command: "/command", "/name".
PLACEHOLDERS = {"command", "name"}


def _strings() -> list[tuple[str, str]]:
    """(where, text) of every string constant in the package's modules."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((f"{path.name}:{node.lineno}", node.value))
    return found


def test_every_named_command_and_subcommand_exists():
    registry = CommandRegistry(builtin_commands())
    assert not [s.name for c in registry for s in c.subcommands if s.name.endswith("s")]
    missing = []
    checked = 0
    for where, text in _strings():
        for name, sub in COMMAND.findall(text):
            if name in PLACEHOLDERS:
                continue
            try:
                cmd = registry.resolve(name)  # exact, alias or unique prefix (/he = /help)
            except UnknownCommandError:
                missing.append(f"{where}: /{name}")
                continue
            checked += 1
            subs = {s.name for s in cmd.subcommands}
            # No subcommand ends in "s"; such a word is prose ("where /train saves").
            if subs and sub and sub not in subs and not sub.endswith("s"):
                missing.append(f"{where}: /{name} {sub}")
    assert not missing, f"messages name commands that do not exist: {missing}"
    assert checked > 40  # the scan does see the package's messages


def test_every_named_flag_exists():
    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    missing = []
    for where, text in _strings():
        if "usage" in text.lower() and "mp13chat" not in text:
            continue
        for flag in FLAG.findall(text):
            if flag.startswith("--") and flag not in known:
                missing.append(f"{where}: {flag}")
    assert not missing, f"messages name flags that do not exist: {missing}"
    assert {"--download", "--model", "-p", "--max-new-tokens"} <= known


def test_the_scan_catches_a_missing_command():
    assert COMMAND.findall("error: x  (/nosuch shows it)") == [("nosuch", "shows")]
    assert COMMAND.findall("see ~/.config/mp13/config.json, tok/s, //etc/hosts") == []


def test_the_readme_usage_line_lists_every_flag():
    # The README's `mp13chat [...]` line left out -p and -i, the one-shot flags.
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("`mp13chat [--model")
    usage = readme[start : readme.index("`", start + 1)]
    flags = {
        min(action.option_strings, key=len)  # the short form where there is one
        for action in build_parser()._actions
        if action.option_strings and "-h" not in action.option_strings
    }
    missing = sorted(flag for flag in flags if f"[{flag}" not in usage)
    assert not missing, f"README's usage line lacks {missing}: {usage}"
