# SPDX-License-Identifier: MIT
"""Every public method of the context layer, the toolbox, the engine and the tool-call
parsers, called with a value of the
wrong type in one argument (the others valid), raises an ``Mp13Error`` or works: never a
bare ``TypeError``/``AttributeError`` from deep inside, and never a write to standard
output's file descriptor (``Session.import_json(1)`` used to open and close fd 1)."""

from __future__ import annotations

import inspect
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

from mp13_context import ChatContext, Cursor, Session, Turn
from mp13_context.testing import FakeEngine
from mp13_toolbox import Mp13Error, Toolbox, ToolCall, ToolsScope

# Values of the wrong type for almost any argument (and a few of the right type, empty).
WRONG: tuple[Any, ...] = (
    55, 1.5, None, b"x", [], {}, object(), False, True, "", "\ud800", float("nan"), [5],
    {"a": 1}, ("a",), -1,
)  # fmt: skip
# Methods that end the object or need a document: covered by their own tests.
SKIP = {"close", "cancel", "promote", "refresh", "import_document", "astream", "stream"}


def _valid(name: str, cur: Cursor, tmp: pathlib.Path) -> Any:
    """A valid value for an argument named ``name``, so only the probed one is wrong."""
    values: dict[str, Any] = {
        "node_id": cur.node_id,
        "parent_id": cur.node_id,
        "conversation_id": cur.conversation_id,
        "scope": "default",
        "text": "hello",
        "prompts": ["hello"],
        "title": "t",
        "label": "l",
        "path": str(tmp / "out.json"),
        "name": "calculator",
        "target": "calculator",
        "call": ToolCall("calculator", {"expression": "1+1"}),
        "turn": Turn(role="user", text="hi"),
        "turns": [Turn(role="user", text="hi")],
        "scope_layer": ToolsScope({"calculator": "silent"}),
        "mode": "silent",
        "risk": "low",
        "answer": "always",
        "format": "hermes",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "calculator", "parameters": {}}}],
        "calls": [ToolCall("calculator", {"expression": "1+1"})],
    }
    return values.get(name, "x")


def _probes(obj: object, cur: Cursor, tmp: pathlib.Path) -> Iterator[tuple[str, Callable[[], Any]]]:
    for name in sorted(dir(obj)):
        method = getattr(obj, name, None)
        if name.startswith("_") or name in SKIP or not callable(method) or inspect.isclass(method):
            continue
        if not getattr(method, "__module__", "").startswith("mp13"):
            continue  # a library object the class exposes (engine.tokenizer): not ours
        if name.startswith("a") and name[1:] in dir(obj):
            continue  # the async twin runs the same checks
        try:
            params = [
                p
                for p in inspect.signature(method).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            continue
        for param in params:
            for value in WRONG:
                args = [
                    value
                    if q is param
                    else (q.default if q.default is not q.empty else _valid(q.name, cur, tmp))
                    for q in params
                ]
                owner = obj.__name__ if inspect.ismodule(obj) else type(obj).__name__
                yield (
                    f"{owner}.{name}({param.name}={value!r:.20})",
                    (lambda m=method, a=args: m(*a)),
                )


def _run_probes(
    objects: tuple[object, ...], cur: Cursor, tmp: pathlib.Path, skip: tuple[str, ...] = ()
) -> tuple[set[str], list[str]]:
    """The methods probed, and each probe that raised something other than an Mp13Error."""
    probed: set[str] = set()
    bare: list[str] = []
    for obj in objects:
        for label, call in _probes(obj, cur, tmp):
            if label.startswith(skip):
                continue
            probed.add(label.split("(")[0])
            try:
                result = call()
                if inspect.iscoroutine(result):
                    result.close()
            except Mp13Error:
                pass
            except Exception as exc:  # what these tests exist to find
                bare.append(f"{label}: {type(exc).__name__}: {exc}")
    return probed, bare


def test_wrong_types_anywhere_are_mp13_errors(tmp_path, capfd):
    session = Session.open(str(tmp_path / "s.db"))
    toolbox = Toolbox()
    toolbox.add_builtins()
    ctx = ChatContext(session, engine=FakeEngine(), toolbox=toolbox)
    cur = ctx.cursor()
    cur.ask("hi")
    cur.ask("there")
    objects = (cur, cur.system, cur.adapters, cur.tools, cur.params, session, ctx, toolbox)
    probed, bare = _run_probes(objects, cur, tmp_path)
    print("still writable")  # fd 1 was not closed by a probe
    assert "still writable" in capfd.readouterr().out
    assert not bare, "\n".join(bare)
    # The probes reach the methods users call (a guard against probing nothing).
    assert {"Cursor.ask", "Cursor.batch", "SystemCommands.set", "ToolCommands.add"} <= probed
    assert {"Session.search", "Session.export_json", "Toolbox.execute", "Toolbox.view"} <= probed
    assert len(probed) > 50
    # Nothing the probes refused broke the branch.
    assert cur.ask("still works").text


def test_wrong_types_given_to_the_engine_are_mp13_errors(tiny_factory, tmp_path):
    from mp13_engine import Engine

    cur = ChatContext(Session.open(":memory:"), engine=FakeEngine()).cursor()
    with Engine.load(str(tiny_factory()), device="cpu", default_max_new_tokens=2) as engine:
        # train: its config is checked in test_bad_config; load and close end the engine.
        skip = ("Engine.train", "Engine.load", "Engine.close")
        probed, bare = _run_probes((engine, engine.adapters), cur, tmp_path, skip)
        assert engine.generate("still serving").ok
    assert not bare, "\n".join(bare)
    assert {"Engine.generate", "Engine.generate_many", "AdapterManager.combine"} <= probed


def test_wrong_types_given_to_the_tool_call_parsers_are_mp13_errors(tmp_path):
    from mp13_engine import toolcalls

    cur = ChatContext(Session.open(":memory:"), engine=FakeEngine()).cursor()
    objects = (toolcalls, toolcalls.StreamParser("hermes"))
    probed, bare = _run_probes(objects, cur, tmp_path)
    assert not bare, "\n".join(bare)
    assert {"mp13_engine.toolcalls.parse", "StreamParser.feed"} <= probed
    assert "mp13_engine.toolcalls.detect_format" in probed
