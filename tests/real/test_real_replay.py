# SPDX-License-Identifier: Apache-2.0
"""A saved conversation replayed greedily on the same real model gives the same text."""

from __future__ import annotations

import pytest

from mp13_context import ChatContext, Session, replay

pytestmark = pytest.mark.real


def test_greedy_replay_of_a_saved_conversation_is_identical(real_engine, tmp_path):
    db = tmp_path / "chats.db"
    with Session.open(db) as session:
        cur = ChatContext(session, engine=real_engine).cursor()
        cur.system.set("You are a geography teacher. Answer in one sentence.")
        cur.params.set(max_new_tokens=24)
        first = cur.ask("What is the capital of France?")
        cur.ask("And of Italy?")
        conversation = cur.conversation_id
    assert "Paris" in first.text

    with Session.open(db) as session:
        report = replay(conversation, into=session, engine=real_engine)
        assert [t.user_text for t in report.turns] == [
            "What is the capital of France?",
            "And of Italy?",
        ]
        assert report.all_equal, [(t.original_text, t.replayed_text) for t in report.turns]
        assert report.conversation_id != conversation
