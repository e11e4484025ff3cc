# SPDX-License-Identifier: MIT
"""What a user types next after a command: the wrong argument, a missing file, a
command in the wrong order. Each gives one line that says what to do (in REPL
commands, not API calls), moves nothing and loses nothing."""

from __future__ import annotations

from mp13_context.testing import FakeEngine


def _flat(out: str) -> str:
    """The output with its line wrapping undone (rich wraps long lines)."""
    return " ".join(out.split())


def test_nested_group_help_and_unknown_subcommand_show_the_full_path(make_chat):
    h = make_chat(FakeEngine())
    out = _flat(h.run("/help tools scope"))
    assert "usage: /tools scope show|add|set|pop|reset ..." in out
    # a summary goes on past "e.g." (it is not the end of a sentence)
    assert "Add a scope layer on this branch, e.g. '*=silent calculator=advertised'." in out
    out = _flat(h.run("/tools scope bogus", "/system bogus"))
    assert "unknown command /tools scope bogus;" in out
    assert "unknown command /system bogus;" in out
    # A guess at a group's word ("/tools off") was sent to /help and its 30 commands:
    # the error names the words the group takes and the help that explains them.
    out = _flat(h.run("/tools off", "/tools scope bogus"))
    assert (
        "unknown command /tools off; /tools takes list, mode, scope, approval, risk "
        "(/help tools explains each)" in out
    )
    assert "/tools scope takes show, add, set, pop, reset (/help tools scope explains" in out
    out = _flat(h.run("/bogus"))
    assert "unknown command /bogus; type /help to list the commands" in out


def test_pop_with_nothing_to_undo_names_repl_commands(make_chat):
    h = make_chat(FakeEngine())
    out = _flat(h.run("/system pop", "/adapters pop", "/tools scope pop"))
    assert "nothing to undo: no /system set, add, none or default on this branch; /system" in out
    assert "nothing to undo: no /adapters use, add, base or default on this branch" in out
    assert "nothing to undo: no scope change on this branch; /tools scope add" in out
    assert ".set(...)" not in out and ".default()" not in out
    out = _flat(h.run("/system set Be brief.", "/system pop"))
    assert "error" not in out  # a change to undo: pop works as before


def test_navigation_errors_count_as_the_user_does_and_move_nothing(make_chat):
    engine = FakeEngine()
    engine.script("one", "two")
    h = make_chat(engine)
    out = _flat(h.run("/next", "/history"))
    assert "this node has no siblings; /retry on a reply makes another one" in out
    assert "no messages on this branch yet; type one to start" in out
    h.run("q", "/retry")
    out = _flat(h.run("/next"))
    assert "this is the last of 2 siblings; /prev goes back" in out
    h.run("/prev")
    out = _flat(h.run("/prev"))
    assert "this is the first of 2 siblings; /next goes forward" in out
    h.run("/up")
    here = h.app.cursor.node_id
    out = _flat(h.run("/down 7", "/up 5"))
    assert "this node has 2 children; give I from 1 to 2" in out  # not "child 6"
    assert "only 1 node above here; /up 1 goes to the root" in out
    assert h.app.cursor.node_id == here  # /up 5 did not stop half way at the root


def test_titles_shared_by_two_conversations_ask_for_an_id(make_chat):
    h = make_chat(FakeEngine())
    out = _flat(h.run("/title Dup"))
    assert "title set: Dup" in out
    first = h.app.cursor.conversation_id
    h.run("/new", "/title Dup")
    out = _flat(h.run("/switch Dup", "/replay dup", "/switch nosuch"))
    assert "2 conversations are titled 'Dup'" in out
    assert "2 conversations are titled 'dup'" in out
    assert "no conversation has the id or title 'nosuch'; /list shows them" in out
    h.run(f"/switch {first[:6]}")
    assert h.app.cursor.conversation_id == first


def test_files_in_missing_folders_or_missing_files_say_what_to_do(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("hello")
    missing = tmp_path / "nope"
    out = _flat(
        h.run(
            f"/save {missing}/x.db",
            f"/export {missing}/x.json",
            f"/save {tmp_path}",
            f"/import {missing}/x.json",
        )
    )
    assert f"the folder '{missing}' does not exist; create it first or pick another path" in out
    assert ".tmp" not in out  # the export's temporary file is not the user's business
    assert f"'{tmp_path}' is a folder; give a file name in it" in out
    assert f"no file '{missing}/x.json'; /export FILE.json writes one" in out
    assert "Session.export_json" not in out
    assert not missing.exists()
    assert "echo: still here" in h.run("still here")


def test_continue_of_a_finished_reply_says_why_nothing_came(make_chat):
    from mp13_context.testing import FakeReply

    engine = FakeEngine()
    engine.script("done.", FakeReply(text=""), FakeReply(text=" more"))
    h = make_chat(engine)
    h.run("q")
    out = _flat(h.run("/continue"))
    assert "the model had nothing to add: that reply had ended (stop)" in out
    out = _flat(h.run("/continue"))
    assert "more" in out and "nothing to add" not in out


def test_unset_of_a_display_setting_restores_the_config_files_value(make_chat, tmp_path):
    h = make_chat(FakeEngine(), markdown=False)
    (tmp_path / "config.json").write_text('{"markdown": false}')
    out = _flat(h.run("/set stream off", "/set markdown on", "/unset stream", "/unset markdown"))
    assert "stream back to the config's on" in out
    assert "markdown back to the config's off" in out
    assert "unknown parameter" not in out
    assert h.app.config.stream is True and h.app.config.markdown is False


def test_importing_a_file_that_is_no_export_names_the_repl_command(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    (tmp_path / "notes.json").write_text('{"a": 1}')
    out = _flat(h.run(f"/import {tmp_path / 'notes.json'}"))
    assert "import refused, nothing was written" in out
    assert "import only files that /export (or Session.export_json) wrote" in out
    assert len(h.app.session.conversations()) == 1


def test_fork_says_the_way_back(make_chat):
    h = make_chat(FakeEngine())
    h.run("hello")
    before = h.app.cursor.node_id
    out = _flat(h.run("/fork side"))
    assert "ask away (/up goes back to where you forked, /tree shows both)" in out
    h.run("/up")
    assert h.app.cursor.node_id == before


def test_promote_and_close_say_what_happened_and_where_you_are(make_chat):
    from mp13_context import TryOut

    h = make_chat(FakeEngine())
    h.run("hello")
    out = _flat(h.run("/try a", "one", "/try b", "two", "/promote"))
    assert "try-out promoted: it is the main line now" in out
    assert "still in the try-out this one was opened in: /promote or /close it too" in out
    assert isinstance(h.app.cursor, TryOut)
    out = _flat(h.run("/close"))
    assert "try-out closed (archived: /tree all shows it); back where it started" in out
    assert "still in the try-out" not in out
    assert not isinstance(h.app.cursor, TryOut)
