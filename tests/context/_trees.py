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


# --- random sessions (the round-trip property tests) ------------------------------------------

#: Texts at the edges: empty, NUL and control characters, right-to-left, emoji and
#: combining marks, a lone surrogate (stored as U+FFFD), words of unspaced scripts.
EDGE_TEXTS = (
    "",
    "\x00",
    "a\x00b\x1fc",
    "\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "emoji \U0001f600\U0001f469\u200d\U0001f4bb e\u0301",
    "lone \ud800 surrogate",
    "\udfff",
    "日本語のテキスト",
    'quotes " \' \\ {"json": [1]}',
    "\ufeff\ufffd\U0010ffff",
)


def texts(st):
    """Any unicode (surrogates included), the edge texts, and very long texts."""
    anything = st.text(st.characters(exclude_categories=()), max_size=12)
    long = st.builds(
        lambda c, n: c * n, st.sampled_from(["x", "é ", "語"]), st.integers(2000, 5000)
    )
    return st.one_of(anything, anything, st.sampled_from(EDGE_TEXTS), long)


def ops(st):
    """A strategy of steps for ``play``: every command kind, asks (with scripted replies of
    every outcome: text, tool calls, cancelled, errors), forks, batches, try-outs promoted,
    closed or left open, retries, continuations, several conversations."""
    from mp13_engine import FinishReason

    text = texts(st)
    names = st.lists(st.sampled_from(["a", "b", "lora"]), max_size=2, unique=True)
    scope = st.builds(
        ToolsScope,
        st.dictionaries(
            st.sampled_from(["*", "add", "calc"]),
            st.sampled_from(["silent", "advertised", "disabled"]),
            max_size=2,
        ),
        label=st.sampled_from(["", "layer"]),
    )
    number = st.one_of(
        st.integers(-(2**70), 2**70),
        st.sampled_from([2**63, 2**63 - 1, -(2**63), 2**64 - 1, 0.1, -0.0, 1e308, 5e-324]),
        st.floats(allow_nan=False, allow_infinity=False),
    )
    param = st.one_of(
        st.tuples(st.just("temperature"), st.one_of(st.none(), st.floats(0, 2))),
        st.tuples(st.just("seed"), st.sampled_from([None, 0, 2**63 - 1, 2**63, 2**64 - 1])),
        st.tuples(st.just("max_new_tokens"), st.integers(1, 64)),
        st.tuples(st.just("stop"), st.lists(text.filter(bool), min_size=1, max_size=2)),
    )
    reply = st.builds(
        lambda t, r, calls, how: FakeReply(
            text=t,
            reasoning=r,
            tool_calls=calls,
            finish_reason=FinishReason.CANCELLED if how == "cancel" else FinishReason.STOP,
            error="boom" if how == "error" else None,
        ),
        text,
        st.sampled_from(["", "think"]),
        st.lists(
            st.builds(
                ToolCall, st.sampled_from(["add", "calc"]), st.fixed_dictionaries({"a": number})
            ),
            max_size=1,
        ),
        st.sampled_from(["ok", "ok", "cancel", "error"]),
    )
    ask = st.tuples(st.just("ask"), st.tuples(text, st.one_of(st.none(), reply)))
    return st.one_of(
        ask,
        ask,
        ask,
        st.tuples(st.just("ask+continue"), st.tuples(text, st.one_of(st.none(), reply))),
        st.tuples(st.sampled_from(["system.set", "system.add", "log", "title"]), text),
        st.tuples(
            st.sampled_from(["system.none", "system.default", "system.pop", "adapters.default"]),
            st.none(),
        ),
        st.tuples(st.sampled_from(["adapters.pop", "tools.reset", "tools.pop", "fork"]), st.none()),
        st.tuples(st.sampled_from(["retry", "continue", "retry", "continue"]), st.none()),
        st.tuples(st.sampled_from(["adapters.set", "adapters.add"]), names),
        st.tuples(st.sampled_from(["tools.set", "tools.add"]), scope),
        st.tuples(st.just("params"), param),
        st.tuples(st.just("record_call"), number),
        st.tuples(st.just("try_out"), st.tuples(text, st.sampled_from(["promote", "close", ""]))),
        st.tuples(st.just("batch"), st.lists(text, min_size=1, max_size=3)),
        st.tuples(st.sampled_from(["switch", "new", "goto"]), st.integers(0, 1000)),
    )


def play(ctx, engine, steps):
    """Apply ``steps`` (from ``ops``) to ``ctx``: several conversations, cursors moving
    between them; a step that does not fit where the cursor is (a pop with nothing to
    undo, a retry with no user turn) is refused with a ``ContextError`` and skipped."""
    from mp13_context import ContextError

    session = ctx.session
    cursors = [ctx.cursor(title="first")]
    cur = cursors[0]
    for op, arg in steps:
        try:
            if op == "ask":
                text, reply = arg
                if reply is not None:
                    engine.script(reply)
                cur.ask(text)
            elif op == "title":
                session.set_title(cur.conversation_id, arg)
            elif op in ("system.set", "system.add"):
                getattr(cur.system, op.split(".")[1])(arg)
            elif op == "log":
                cur.log(arg)
            elif op.split(".")[0] in ("system", "adapters", "tools"):
                family, verb = op.split(".")
                handle = getattr(cur, family)
                getattr(handle, verb)(*(() if arg is None else (arg,)))
            elif op == "params":
                cur.params.set(**{arg[0]: arg[1]})
            elif op == "record_call":
                cur.record_call("engine.call", value=arg, nested={"list": [arg, None, True]})
            elif op == "fork":
                cur = cur.fork("fork")
                cursors.append(cur)
            elif op == "try_out":  # a try-out with one question, promoted, closed or left open
                text, end = arg
                trial = cur.try_out()
                trial.ask(text)
                if end:
                    getattr(trial, end)()
                else:
                    cur = trial
                    cursors.append(cur)
            elif op == "retry":
                cur.retry()
            elif op == "continue":
                cur.continue_()
            elif op == "ask+continue":  # a reply and its continuation (itself cut or failed)
                text, reply = arg
                cur.ask(text)
                if reply is not None:
                    engine.script(reply)
                cur.continue_()
            elif op == "batch":
                cursors.extend(cur.batch(arg))
            elif op == "new":
                cur = ctx.cursor(title=f"conversation {arg}")
                cursors.append(cur)
            elif op == "switch":
                cur = cursors[arg % len(cursors)]
            elif op == "goto":
                nodes = session.conversation_nodes(cur.conversation_id)
                cur = ctx.cursor(at=nodes[arg % len(nodes)].id)
                cursors.append(cur)
        except ContextError:
            pass
    return cursors


def resolved(settings):
    """What settings resolve to, without their undo links (ids in one session's table)."""
    return (settings.system, settings.adapters, settings.tool_scopes, settings.params)


def snapshot(session, scope="default"):
    """Everything a reader sees of a session: conversations, their nodes (ids, order,
    flags, hashes), children order, settings and messages at each node, saved positions
    (``scope``'s, where it resumes, and every scope's)."""
    out = []
    for info in session.conversations():
        nodes = session.conversation_nodes(info.id)
        out.append(
            {
                "info": info,
                "nodes": nodes,
                "children": {n.id: [c.id for c in session.children(n.id)] for n in nodes},
                "settings": {n.id: resolved(session.settings_at(n.id)) for n in nodes},
                "messages": {
                    n.id: session.messages(n.id) for n in nodes if not session.has_children(n.id)
                },
                "leaf": session.leaf(info.root_id).id,
                "position": session.position(scope, info.id),
                "resume": session.resume_point(scope, info.id),
                "positions": session.saved_positions(info.id),  # every scope's
            }
        )
    return out


def old_session_file(path, upto):
    """A session file with the first ``upto`` migrations, holding a conversation (a
    system command and a user turn) as that schema stored it: written by hand, not by
    today's code."""
    import sqlean

    from mp13_context._integrity import row_hash
    from mp13_context._migrations import MIGRATIONS, migrate

    names = [name for name, _ in MIGRATIONS][:upto]
    conn = sqlean.connect(str(path), isolation_level=None)
    migrate(conn, upto=upto)
    state = (
        '{"system":["text","old sys"],"adapters":null,"tools":[],"params":{},"prev":[1,null,null]}'
    )
    conn.execute("INSERT INTO states (id, data) VALUES (1, ?)", ('{"system":["default",""]}',))
    conn.execute("INSERT INTO states (id, data) VALUES (2, ?)", (state,))
    conn.execute(
        "INSERT INTO conversations (id, title, root_id, head_id, created_at) "
        "VALUES ('c1', 'old', 'r1', 'u1', 1.0)"
    )
    cmds = '[{"kind":"system.set","at":1.0,"text":"old sys"}]'
    conn.execute(
        "INSERT INTO nodes (id, conversation_id, parent_id, kind, depth, turn, commands, "
        "created_at, state_id) VALUES ('r1', 'c1', NULL, 'root', 0, NULL, ?, 1.0, 2)",
        (cmds,),
    )
    conn.execute(
        "INSERT INTO nodes (id, conversation_id, parent_id, kind, depth, turn, commands, "
        "created_at, state_id) VALUES ('u1', 'c1', 'r1', 'turn', 1, ?, NULL, 2.0, 2)",
        ('{"role":"user","text":"remember the walrus"}',),
    )
    if "0002_search" in names:  # that version indexed turns as it saved them
        conn.execute(
            "INSERT INTO search (text, role, conversation_id, node_id) "
            "VALUES ('remember the walrus', 'user', 'c1', 'u1')"
        )
    if "0004_hashes" in names:  # that version hashed nodes as it saved them
        rows = conn.execute(
            "SELECT id, kind, turn, commands, label, created_at FROM nodes ORDER BY seq"
        ).fetchall()
        parent = ""
        for nid, *content in rows:  # r1, then its child u1
            parent = row_hash(parent, *content)
            conn.execute("UPDATE nodes SET hash = ? WHERE id = ?", (parent, nid))
    conn.close()
