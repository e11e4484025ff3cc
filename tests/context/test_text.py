# SPDX-License-Identifier: MIT
"""Text the store keeps and searches: lone surrogates, control characters, any search text."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_context import ChatContext, Command, CommandKind, NodeKind, Role, Session, Turn
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall, ToolResult

SURROGATE_NAME = os.fsdecode(b"report-\xff.txt")  # what os.listdir gives on a non-UTF-8 name
STORED_NAME = "report-\ufffd.txt"


def test_the_test_name_really_holds_a_lone_surrogate():
    assert SURROGATE_NAME == "report-\udcff.txt"


def test_a_lone_surrogate_is_stored_as_the_replacement_character(tmp_path):
    path = tmp_path / "s.db"
    session = Session.open(path)
    info = session.new_conversation(title=f"about {SURROGATE_NAME}")
    turn = Turn(
        role=Role.ASSISTANT,
        text=f"see {SURROGATE_NAME}",
        reasoning=SURROGATE_NAME,
        tool_calls=[ToolCall("read", {"path": SURROGATE_NAME, SURROGATE_NAME: [SURROGATE_NAME]})],
    )
    node = session.append(info.root_id, NodeKind.TURN, turn, label=SURROGATE_NAME)
    assert node.turn.text == f"see {STORED_NAME}"  # the value handed back is what is stored
    assert node.turn.tool_calls[0].arguments == {"path": STORED_NAME, STORED_NAME: [STORED_NAME]}
    assert node.label == STORED_NAME
    cmd = Command(kind=CommandKind.SYSTEM_SET, text=f"files: {SURROGATE_NAME}")
    placeholder = session.append(node.id, NodeKind.PLACEHOLDER, commands=[cmd])
    assert session.settings_at(placeholder.id).system.text == f"files: {STORED_NAME}"
    assert session.conversation(info.id).title == f"about {STORED_NAME}"
    assert session.search("report")[0].node_id == node.id
    assert session.search(SURROGATE_NAME)[0].node_id == node.id  # queries are cleaned alike
    session.close()
    again = Session.open(path)
    assert again.node(node.id) == node
    assert again.settings_at(placeholder.id).system.text == f"files: {STORED_NAME}"
    assert again.verify().ok
    out = tmp_path / "e.json"
    again.export_json(out)
    copy = Session.import_json(out)
    assert copy.node(node.id) == node
    again.close()


def test_a_tool_result_with_a_lone_surrogate_is_recorded_and_every_call_has_its_result():
    def list_files(folder: str) -> str:
        """List the files of a folder.

        Args:
            folder: where
        """
        return f"{folder}: {SURROGATE_NAME}, notes.txt"

    tb = Toolbox()
    tb.register(list_files)
    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("list_files", {"folder": "/data"})]), "done")
    session = Session.open(":memory:")
    cur = ChatContext(session, engine=engine, toolbox=tb).cursor()
    assert cur.ask(f"what is in /data? I saw {SURROGATE_NAME}").text == "done"
    turns = [n.turn for n in cur.path() if n.turn]
    assert [t.role for t in turns] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    (result,) = turns[2].tool_results
    assert result == ToolResult(
        name="list_files",
        content=f"/data: {STORED_NAME}, notes.txt",
        call_id=turns[1].tool_calls[0].id,
        duration_s=result.duration_s,
    )
    assert STORED_NAME in engine.requests[-1].messages[0]["content"]  # the model saw it too
    session.close()


def test_nul_and_control_characters_are_kept_as_they_are(session):
    info = session.new_conversation()
    text = "col1\tcol2\x00tail\x1b[0m bell\x07"
    node = session.append(info.root_id, NodeKind.TURN, Turn(role=Role.USER, text=text))
    session.refresh()
    assert session.node(node.id).turn.text == text


def test_plain_word_search_accepts_any_text_and_says_what_it_matches(session):
    info = session.new_conversation()

    def say(text):
        return session.append(info.root_id, NodeKind.TURN, Turn(role=Role.USER, text=text)).id

    nul = say("he\x00llo world")
    mail = say("send an e-mail now")
    fox = say("the quick brown fox")
    assert [h.node_id for h in session.search("he\x00llo")] == [nul]  # tokens in a row
    assert [h.node_id for h in session.search("he llo")] == [nul]
    assert [h.node_id for h in session.search("e\x00mail")] == [mail]
    assert [h.node_id for h in session.search('"e-mail"')] == [mail]
    assert [h.node_id for h in session.search("fox !!")] == [fox]  # no token: no narrowing
    for text in ["\x00", "!!", '"', "'", "*", "AND", "NEAR(", "^x", "col:x", "\x01\x02", "\ud800"]:
        assert session.search(text) == [], repr(text)


# Every code point: NUL, controls, quotes, FTS5 syntax and lone surrogates included.
ANY_TEXT = st.text(
    st.characters(exclude_categories=()) | st.sampled_from('\x00"*^:()'), max_size=12
)


@settings(max_examples=150, deadline=None)
@given(ANY_TEXT)
def test_plain_word_search_never_raises(text):
    with Session.open(":memory:") as session:
        info = session.new_conversation()
        session.append(info.root_id, NodeKind.TURN, Turn(role=Role.USER, text=f"x {text} y"))
        hits = session.search(text)
        assert all(h.conversation_id == info.id for h in hits)
