# SPDX-License-Identifier: MIT
"""/import of a file whose ids the session has (its own export) offers copies in REPL
terms, and brings each conversation back where the exporting REPL was in it; /tools
scope layers only narrow the toolbox (the operator's ceiling) and say so."""

from __future__ import annotations

from mp13_context.testing import FakeEngine


def _flat(out: str) -> str:
    """The output with its line wrapping undone (rich wraps long lines)."""
    return " ".join(out.split())


def test_importing_the_sessions_own_export_offers_copies(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("exported words")
    dump = tmp_path / "dump.json"
    h.run(f"/export {dump}")
    out = _flat(h.run(f"/import {dump}"))
    assert "holds conversations this session already has, so nothing was imported" in out
    assert f"/import {dump} copy imports them as copies under new ids" in out
    assert "new_ids" not in out  # Python wording stays out of the REPL
    assert len(h.app.session.conversations()) == 1
    out = _flat(h.run(f"/import {dump} copy"))
    assert f"imported copies of 1 conversation from {dump}" in out  # not "conversation(s)"
    assert len(h.app.session.conversations()) == 2
    hits = h.app.session.search("exported")
    assert len({hit.conversation_id for hit in hits}) == 2  # the original and its copy
    out = h.run(f"/import {dump} twice")
    assert "usage: /import FILE.json [copy]" in _flat(out)


def test_importing_into_another_session_needs_no_copies(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("exported words")
    dump = tmp_path / "dump.json"
    h.run(f"/export {dump}")
    other = make_chat(FakeEngine())
    out = _flat(other.run(f"/import {dump}"))
    assert f"imported 1 conversation from {dump}" in out
    assert other.app.session.search("exported")
    h.run("/new", "second words")
    h.run(f"/export {dump} overwrite")
    third = make_chat(FakeEngine())
    assert f"imported 2 conversations from {dump}" in _flat(third.run(f"/import {dump}"))


def test_an_import_lists_where_each_conversation_was_and_switch_goes_there(make_chat, tmp_path):
    # The user went back up in "one" and then worked elsewhere: "one" must come back at
    # that node, not at its newest one, in the REPL that imports the export.
    h = make_chat(FakeEngine())
    h.run("/title one", "first question", "second question", "/up 2")
    tip = h.app.cursor.node_id
    one = h.app.cursor.conversation_id
    h.run("/new two", "other question")
    newest = h.app.session.conversation(one).head_id
    assert newest != tip
    dump = tmp_path / "dump.json"
    h.run(f"/export {dump}")
    other = make_chat(FakeEngine())
    here = other.app.cursor.conversation_id
    out = other.run(f"/import {dump}")
    row = next(line for line in out.splitlines() if " one " in line)
    assert tip[:6] in row and newest[:6] not in row  # listed at the saved position
    assert other.app.cursor.conversation_id == here  # the import does not move this REPL
    out = _flat(other.run("/switch one"))
    assert other.app.cursor.node_id == tip
    assert f"switched to {one[:6]} at {tip[:6]}" in out
    # The current conversation is listed at the cursor, wherever it has moved.
    other.run("/up")
    row = next(line for line in other.run("/list").splitlines() if " one " in line)
    assert "▶" in row and other.app.cursor.node_id[:6] in row


def test_a_scope_layer_cannot_widen_a_tools_global_mode_and_says_how_to(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)

    def advertised() -> list[str]:
        return [t["function"]["name"] for t in engine.requests[-1].tools or ()]

    h.run("/tools mode calculator silent")
    out = _flat(h.run("/tools scope add calculator=advertised", "go"))
    assert "calculator" not in advertised()  # the toolbox is the ceiling
    assert "calculator stays silent here, not advertised" in out
    assert "/tools mode calculator advertised changes it for every branch" in out
    h.run("/tools mode calculator advertised", "go again")
    assert "calculator" in advertised()  # widened where the operator's policy lives
    out = h.run("/tools scope add *=silent")  # narrowing is what layers are for
    assert "stays" not in out


def test_scope_help_says_layers_only_narrow(make_chat):
    h = make_chat(FakeEngine())
    out = _flat(h.run("/help tools scope"))
    assert "only narrows what the toolbox allows" in out
    assert "never advertise a tool whose global mode is silent" in out
    assert "/tools mode changes a tool's global mode for every branch" in out
