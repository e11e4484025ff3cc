# SPDX-License-Identifier: MIT
"""Trees and store snapshots shared by the store, import and integrity tests."""

from __future__ import annotations

from mp13_context import ChatContext
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall, ToolsScope


def build_tree(session):
    """A conversation with commands, a fork, a try-out, a batch and a tool round."""
    engine = FakeEngine()
    ctx = ChatContext(session, engine=engine)
    cur = ctx.cursor(title="tree")
    cur.system.set("sys")
    cur.tools.add(ToolsScope({"*": "silent"}))
    cur.params.set(temperature=0.5, stop=["X"])
    cur.ask("alpha question")
    alt = cur.fork("alt")
    alt.adapters.set(["lora"])
    alt.ask("beta question")
    t = cur.try_out()
    t.ask("gamma question")
    t.close()
    cur.batch(["delta", "epsilon"])
    engine.script(FakeReply(tool_calls=[ToolCall("add", {"a": 1})], reasoning="think"), "done")
    cur.ask("use a tool")
    cur.log("a note")
    return ctx, cur


def rows(session):
    """The schema and every row of every table (FTS5 shadow tables included)."""
    with session._store.lock:
        conn = session._store.conn
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        out = {"": schema}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            data = conn.execute(f'SELECT * FROM "{name}"').fetchall()
            out[name] = sorted(map(repr, data))
        return out
