# SPDX-License-Identifier: MIT
"""Writing an export: a file that exists is kept unless the caller asks to replace it."""

from __future__ import annotations

import json
import os

import pytest

from mp13_context import ChatContext, ContextError, SerializationError, Session, StoreError
from mp13_context._export import session_data
from mp13_context.testing import FakeEngine


def test_an_export_never_overwrites_a_file_unless_asked(ctx, session, tmp_path):
    ctx.cursor().ask("first words")
    out = tmp_path / "out.json"
    out.write_text("the user's own notes")
    with pytest.raises(SerializationError) as err:
        session.export_json(out)
    assert str(err.value) == (
        f"{str(out)!r} exists; an export never overwrites a file: pick a new file name, or "
        "pass overwrite=True to replace it (the session itself is unchanged)"
    )
    assert out.read_text() == "the user's own notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left
    session.export_json(out, overwrite=True)
    with Session.import_json(out) as copy:
        assert {h.snippet for h in copy.search("first")} == {"[first] words", "echo: [first] words"}


def test_the_same_export_twice_is_refused_the_second_time(ctx, session, tmp_path):
    """As ``save_copy``: the second export to one name keeps the first."""
    ctx.cursor().ask("one")
    out = tmp_path / "out.json"
    session.export_json(out)
    first = out.read_text()
    ctx.cursor().ask("two")
    with pytest.raises(SerializationError, match="exists; an export never overwrites"):
        session.export_json(out)
    assert out.read_text() == first
    with pytest.raises(StoreError, match="exists; a copy never overwrites"):
        session.save_copy(tmp_path / "out.json")  # the copy refuses alike
    session.export_json(out, overwrite=True)
    assert len(json.loads(out.read_text())["conversations"]) == 2


def test_a_dangling_link_is_a_name_taken(session, tmp_path):
    link = tmp_path / "link.json"
    os.symlink(tmp_path / "nowhere", link)
    with pytest.raises(SerializationError, match="exists"):
        session.export_json(link)
    assert not (tmp_path / "nowhere").exists()


def test_a_file_named_like_the_old_temporary_is_left_alone(ctx, session, tmp_path):
    """Exports once wrote ``NAME.tmp`` first, replacing a user's file of that name."""
    ctx.cursor().ask("hi")
    mine = tmp_path / "out.json.tmp"
    mine.write_text("mine")
    session.export_json(tmp_path / "out.json")
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.tmp"]


def test_an_export_has_the_usual_file_permissions(session, tmp_path):
    reference = tmp_path / "plain"
    reference.write_text("")
    session.export_json(tmp_path / "out.json")
    assert (tmp_path / "out.json").stat().st_mode == reference.stat().st_mode


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_overwrite_is_a_bool(session, tmp_path, flag):
    out = tmp_path / "out.json"
    out.write_text("kept")
    with pytest.raises(ContextError, match=f"overwrite is True or False, not {flag!r}"):
        session.export_json(out, overwrite=flag)
    assert out.read_text() == "kept"


def test_a_folder_or_no_name_asks_for_a_file_name(session, tmp_path):
    with pytest.raises(SerializationError) as err:
        session.export_json(tmp_path, overwrite=True)
    assert str(err.value) == (
        f"cannot write session export {str(tmp_path)!r}: give a file name in that folder"
    )
    with pytest.raises(SerializationError, match=r"^cannot write session export '': give a file"):
        session.export_json("")
    assert list(tmp_path.iterdir()) == []


def test_an_export_does_not_keep_the_whole_session_in_memory(tmp_path):
    # Every exported node stayed in the session's node cache: after exporting a 50 MB
    # session (18,000 nodes) Python held 88 MB more until the session was closed.
    path = tmp_path / "s.db"
    with Session.open(path) as session:
        cur = ChatContext(session, engine=FakeEngine()).cursor()
        for i in range(30):
            cur.ask(f"question {i}")
        expected = session_data(session)
    with Session.open(path) as session:
        session.export_json(tmp_path / "out.json")
        for info in session.conversations():
            session.conversation_nodes(info.id)
        assert len(session._nodes) == 0
        assert session_data(session) == expected
        with Session.import_json(tmp_path / "out.json") as again:
            assert session_data(again) == expected
