# SPDX-License-Identifier: MIT
"""The slash-command registry: commands are functions registered by name, not an if-chain.

A ``Command`` is a frozen value made by the ``@command(...)`` decorator from an async
(or plain) function ``func(repl, line)``; its docstring is its help text (first sentence =
summary). The registry knows nothing of the app: ``repl`` is whatever the app hands its
commands (``Command`` and ``CommandRegistry`` are generic in it; mp13chat's own commands
take a ``_repl.Repl``). A command may instead be a group of subcommands (``group_command``), e.g.
``/system set|add|pop|show``, resolved the same way one level down.

A command's ``usage`` is also what it accepts: when the usage shows nothing after the
command's name (``/quit``, ``/tools scope pop``, the default for a command given no
usage), words after it are refused with a ``UsageError`` instead of silently ignored.
A command that takes words says so in its usage: ``@command("name", usage="/name
ARGS")``. When a command made without ``usage=`` refuses words, the error says that too,
so the app's author sees what to change (mp13chat's own commands refuse them on purpose
and leave that out).

Resolution (``CommandRegistry.resolve``): an exact name or alias wins; otherwise a word
that is a prefix of exactly one name is that command; a prefix of several is an
``UnknownCommandError`` listing them. Names are unique across names and aliases (checked
on ``add``). A registry is an ordinary object owned by one app, so wrapper apps can add
commands without touching anyone else's.
"""

from __future__ import annotations

import inspect
import json
import shlex
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Generic, TypeAlias, TypeVar

import attrs

from mp13chat._errors import ChatError, UnknownCommandError, UsageError

#: What the app hands its commands (mp13chat's own commands take a ``_repl.Repl``).
R = TypeVar("R")
#: ``func(repl, line)``; may be a coroutine function.
CommandFunc: TypeAlias = Callable[[R, "CommandLine"], "Awaitable[None] | None"]
#: ``complete(repl, index, words)``: candidates for argument number ``index`` given the
#: words typed before it.
ArgCompleter: TypeAlias = Callable[[R, int, list[str]], Iterable[str]]


@attrs.frozen
class CommandLine:
    """The text after a command's name (and subcommand), with parsing helpers."""

    raw: str = ""

    @property
    def words(self) -> list[str]:
        """Shell-like words; quotes group words together."""
        try:
            return shlex.split(self.raw)
        except ValueError as exc:
            raise UsageError(f"cannot split the arguments ({exc}); close the quote") from exc

    @property
    def text(self) -> str:
        """The raw text, stripped: for commands that take free text (messages, prompts)."""
        return self.raw.strip()

    def require_text(self, what: str) -> str:
        if not self.text:
            raise UsageError(f"give {what}")
        return self.text

    def require_words(self, what: str, low: int = 1, high: int | None = None) -> list[str]:
        """The words, if there are ``low`` to ``high`` of them (``None``: no upper bound);
        else ``UsageError("give {what}")``."""
        words = self.words
        if len(words) < low or (high is not None and len(words) > high):
            raise UsageError(f"give {what}")
        return words


@attrs.frozen
class Command(Generic[R]):
    """One slash command (or a group of subcommands)."""

    name: str
    func: CommandFunc[R] | None
    group: str = "other"
    usage: str = ""
    aliases: tuple[str, ...] = ()
    subcommands: tuple[Command[R], ...] = ()
    default: str | None = None  # subcommand run when none is named
    complete: ArgCompleter[R] | None = attrs.field(default=None, eq=False)
    doc_text: str = ""
    #: ``usage`` was left to ``command``'s default (``/name``): its refusal of words also
    #: tells the app's author how to accept them.
    usage_defaulted: bool = attrs.field(default=False, eq=False)

    def __attrs_post_init__(self) -> None:
        for word in (self.name, *self.aliases):
            if (
                not isinstance(word, str)
                or not word
                or word.startswith("/")
                or word != "".join(word.split())
            ):
                raise ChatError(
                    f"a command name or alias is one word without the leading /, got {word!r} "
                    "(the user types /NAME): e.g. @command('ping')"
                )
        if self.func is not None and not callable(self.func):
            raise ChatError(
                f"/{self.name}: a command's function must be callable, not {self.func!r}"
            )
        if self.func is None and not self.subcommands:
            raise ChatError(f"/{self.name} has neither a function nor subcommands")
        names = {k for c in self.subcommands for k in (c.name, *c.aliases)}
        if self.default is not None and self.default not in names:
            raise ChatError(
                f"/{self.name}: default={self.default!r} names none of its subcommands "
                f"({', '.join(c.name for c in self.subcommands)})"
            )

    @property
    def doc(self) -> str:
        """The full help text (the function's docstring, or the group's text)."""
        if self.func is not None and not self.doc_text:
            return inspect.getdoc(self.func) or ""
        return self.doc_text

    @property
    def summary(self) -> str:
        """The first sentence of the help text (it may wrap over several docstring lines)."""
        return _first_sentence(" ".join(self.doc.strip().split("\n\n", 1)[0].split()))

    @property
    def takes_arguments(self) -> bool:
        """Whether the usage shows anything after the name (``/quit`` does not)."""
        return self.usage.split()[-1].lstrip("/") != self.name

    def subcommand(self, word: str) -> Command[R]:
        """The subcommand named by ``word`` (exact, alias or unique prefix)."""
        return _resolve(self.subcommands, word, f"/{self.name} ")

    async def run(self, repl: R, line: CommandLine) -> None:
        if self.func is None:
            names = ", ".join(c.name for c in self.subcommands)
            raise UsageError(f"/{self.name} needs a subcommand: {names}")
        if line.text and not self.takes_arguments:
            hint = ""
            if self.usage_defaulted:
                hint = (
                    f" (it was made without usage=, so it takes none; to take words, its "
                    f"app declares them: @command({self.name!r}, usage='{self.usage} ARGS'))"
                )
            raise UsageError(f"{self.usage} takes no arguments, got {line.text!r}{hint}")
        result = self.func(repl, line)
        if inspect.isawaitable(result):
            await result


def command(
    name: str,
    *,
    group: str = "other",
    usage: str = "",
    aliases: Iterable[str] = (),
    complete: ArgCompleter[R] | None = None,
) -> Callable[[CommandFunc[R]], Command[R]]:
    """Decorator: turn ``func(repl, line)`` into a ``Command`` whose help is its docstring.

    ``usage`` shows the arguments and is also what the command accepts: the default,
    ``/name``, shows none, so ``/name some words`` is refused with a ``UsageError``. A
    command that reads ``line`` declares its words: ``@command("name", usage="/name
    ARGS")`` (``[ARG]`` for optional ones)."""

    def wrap(func: CommandFunc[R]) -> Command[R]:
        return Command(
            name=name,
            func=func,
            group=group,
            usage=usage or f"/{name}",
            aliases=tuple(aliases),
            complete=complete,
            usage_defaulted=not usage,
        )

    return wrap


def group_command(
    name: str,
    *subcommands: Command[R],
    group: str,
    doc: str,
    default: str | None = None,
    aliases: Iterable[str] = (),
    usage: str = "",
) -> Command[R]:
    """A command made of subcommands (``/name sub args``); ``default`` runs on ``/name``.

    ``usage`` defaults to ``/name sub|sub ... ...``. A subcommand's usage shows what the
    user types, the group's path included: one written as if alone (the default of
    ``@command("sub")``, or its own usage with ``ARGS`` after its name) becomes
    ``/name sub`` (``/name sub ARGS``), also in groups nested further (a nested group's
    own usage may give its full path, ``/tools scope ...``, or be left to default)."""
    names = [c.name for c in subcommands]
    usage = usage or f"/{name} {'|'.join(names)} ..."
    words = usage.split()
    ends = [i for i, w in enumerate(words) if w.lstrip("/") == name]
    path = " ".join(words[: ends[0] + 1]) if ends else f"/{name}"
    return Command(
        name=name,
        func=None,
        group=group,
        usage=usage,
        aliases=tuple(aliases),
        subcommands=tuple(_rebased(c, f"/{c.name}", f"{path} {c.name}") for c in subcommands),
        default=default,
        doc_text=doc,
    )


def _rebased(cmd: Command[R], old: str, new: str) -> Command[R]:
    """``cmd`` (and its subcommands) with the usage path ``old`` replaced by ``new``
    where a usage starts with it; other usages are kept as written."""
    usage = cmd.usage
    if usage == old or usage.startswith(old + " "):
        usage = new + usage[len(old) :]
    subs = tuple(_rebased(c, old, new) for c in cmd.subcommands)
    return attrs.evolve(cmd, usage=usage, subcommands=subs)


def _resolve(commands: Iterable[Command[R]], word: str, prefix: str) -> Command[R]:
    table: dict[str, Command[R]] = {}
    for cmd in commands:
        for key in (cmd.name, *cmd.aliases):
            table[key] = cmd
    if word in table:
        return table[word]
    matches = {id(c): c for key, c in table.items() if key.startswith(word)}
    if len(matches) == 1:
        return next(iter(matches.values()))
    if not matches:
        group = prefix.strip()
        if group == "/":
            hint = "type /help to list the commands"
        else:  # a group's word: name the ones it has ("/tools off" is a guess at one)
            subs = ", ".join(dict.fromkeys(c.name for c in table.values()))
            hint = f"{group} takes {subs} (/help {group.lstrip('/')} explains each)"
        raise UnknownCommandError(f"unknown command {prefix.lstrip()}{word}; {hint}")
    names = ", ".join(sorted(prefix.lstrip() + c.name for c in matches.values()))
    raise UnknownCommandError(f"{prefix.lstrip()}{word} is ambiguous: {names}; type more letters")


@attrs.frozen
class Invocation(Generic[R]):
    """A parsed input line: the command to run and its argument text."""

    command: Command[R]
    line: CommandLine


class CommandRegistry(Generic[R]):
    """Name → ``Command`` map of one app (see the module docstring for the rules)."""

    def __init__(self, commands: Iterable[Command[R]] = ()) -> None:
        self._commands: dict[str, Command[R]] = {}
        for cmd in commands:
            self.add(cmd)

    def add(self, cmd: Command[R]) -> None:
        """Register ``cmd``; its name and aliases must not be taken yet."""
        if not isinstance(cmd, Command):
            raise ChatError(
                f"{cmd!r} is not a command; make one with @mp13chat.command(NAME) on a "
                "function func(repl, line) (or mp13chat.group_command) and register that"
            )
        taken = {k for c in self._commands.values() for k in (c.name, *c.aliases)}
        clash = sorted(taken & {cmd.name, *cmd.aliases})
        if clash:
            raise ChatError(
                f"command name {', '.join(clash)} is already registered; pick another name"
            )
        self._commands[cmd.name] = cmd

    def __iter__(self) -> Iterator[Command[R]]:
        return iter(sorted(self._commands.values(), key=lambda c: c.name))

    def resolve(self, word: str) -> Command[R]:
        """The command named by ``word`` (exact name, alias, or unique prefix)."""
        return _resolve(self._commands.values(), word.lstrip("/"), "/")

    def find(self, words: Iterable[str]) -> Command[R]:
        """The command a path of names picks out, each word a (sub)command of the one
        before (``["tools", "scope"]`` is ``/tools scope``); ``UnknownCommandError`` when a
        word names none, e.g. one after a command without subcommands."""
        first, *rest = words
        cmd = self.resolve(first)
        path = f"/{cmd.name}"
        for word in rest:
            if not cmd.subcommands:
                raise UnknownCommandError(
                    f"{path} has no subcommands, so {word!r} names none; type {path} alone"
                )
            cmd = _resolve(cmd.subcommands, word, path + " ")
            path += f" {cmd.name}"
        return cmd

    def parse(self, text: str, *, defaults: bool = True) -> Invocation[R]:
        """Split ``/name [sub] args`` into the command chain and its argument text.

        ``defaults=False`` stops at a group instead of running its default subcommand
        (``/help tools`` explains the group)."""
        body = text.strip()
        if not body.startswith("/") or body == "/":
            raise UsageError("a command starts with / followed by its name; try /help")
        word, _, rest = body[1:].partition(" ")
        cmd = self.resolve(word)
        path = f"/{cmd.name} "  # what the user typed so far, for "unknown command /a b"
        while cmd.subcommands:
            sub_word, _, sub_rest = rest.strip().partition(" ")
            if not sub_word:
                if cmd.default is None or not defaults:
                    break
                cmd = cmd.subcommand(cmd.default)
            else:
                cmd = _resolve(cmd.subcommands, sub_word, path)
                path += f"{cmd.name} "
                rest = sub_rest
        return Invocation(command=cmd, line=CommandLine(rest))

    def groups(self) -> dict[str, list[Command[R]]]:
        """Commands by group, groups in first-registered order, commands by name."""
        out: dict[str, list[Command[R]]] = {}
        for cmd in self._commands.values():
            out.setdefault(cmd.group, []).append(cmd)
        return {g: sorted(cs, key=lambda c: c.name) for g, cs in out.items()}


def parse_int(text: str, what: str, *, minimum: int | None = None) -> int:
    """``text`` as an int, or a ``UsageError`` naming ``what``."""
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what} must be a whole number, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise UsageError(f"{what} must be at least {minimum}, got {value}")
    return value


def parse_assignments(words: Iterable[str], what: str, form: str) -> dict[str, str]:
    """``KEY=VALUE`` words as a dict (a later key wins); a word without ``=`` or without a
    key is a ``UsageError`` that shows ``form`` (``"key=value (e.g. max_steps=50)"``)."""
    out: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise UsageError(f"write {what} as {form}, got {word!r}")
        out[key] = value
    return out


#: Words that are a boolean or None besides JSON's ``true``/``false``/``null``: the REPL's
#: own ``on``/``off`` and Python's spelling, which the library's messages use
#: (``overwrite=True``), so advice copied from an error works as typed.
_WORD_VALUES: dict[str, Any] = {
    "on": True,
    "yes": True,
    "True": True,
    "off": False,
    "no": False,
    "False": False,
    "None": None,
}


def parse_value(text: str) -> Any:
    """A parameter value typed by the user: a word of ``_WORD_VALUES``, a JSON literal, or
    else the text."""
    word = text.strip()
    if word in _WORD_VALUES:
        return _WORD_VALUES[word]
    try:
        return json.loads(word)
    except ValueError:
        return text


#: Full stops that do not end a sentence ("..., e.g. '*=silent'" is one sentence).
_ABBREVIATIONS = (" e.g.", " i.e.", "(e.g.", "(i.e.")


def _first_sentence(text: str) -> str:
    """Up to the first full stop outside parentheses and abbreviations (so "(e.g. ...)"
    and ", e.g. ..." do not end it)."""
    depth = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "." and depth == 0 and text[i + 1 : i + 2] in ("", " "):
            if text[: i + 1].endswith(_ABBREVIATIONS):
                continue
            return text[: i + 1]
    return text
