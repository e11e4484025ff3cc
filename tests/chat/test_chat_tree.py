# SPDX-License-Identifier: MIT
"""/tree: the main line down the left, branches indented under the node they leave
from and labelled in words, the main-line marker shown, no internal node kinds."""

from __future__ import annotations

from mp13_context.testing import FakeEngine
from mp13chat._tree import STAR


def _lines(out: str) -> list[str]:
    return [line.rstrip() for line in out.splitlines() if line.strip()]


def _indent(lines: list[str], text: str) -> int:
    """Column where the line containing ``text`` starts its label (its tree depth)."""
    line = next(line for line in lines if text in line)
    return len(line) - len(line.lstrip("│├└─ "))


def test_a_fork_is_a_branch_not_the_next_turn(make_chat):
    h = make_chat(FakeEngine())
    h.run("first", "second")
    h.run("/up 2", "/fork alt", "other question")
    lines = _lines(h.run("/tree"))
    # the fork's question hangs under the reply it leaves from, deeper than the main line
    assert _indent(lines, "user: other question") > _indent(lines, "user: second")
    assert _indent(lines, "user: first") == _indent(lines, "assistant: echo: first")
    assert any("⑂ fork alt" in line for line in lines)
    # the fork is the newest child: /leaf follows it, so the main line goes on there
    here = next(line for line in lines if "◀ you are here" in line)
    assert "echo: other question" in here


def test_no_internal_node_kinds_and_commands_in_words(make_chat):
    h = make_chat(FakeEngine(), params={"max_new_tokens": 32})
    h.run("hi", "/system set Be brief.", "/set temperature 0.5", "again", "/try", "t", "/close")
    out = h.run("/tree")
    for internal in ("placeholder", "fork_hub", "batch_hub", "(root)"):
        assert internal not in out
    assert "⚙ system set 'Be brief.'" in out and "temperature=0.5" in out
    assert "⑂ try-out (closed)" in out


def test_the_main_line_marker_shows_where_the_main_line_goes_on(make_chat):
    h = make_chat(FakeEngine())
    h.run("q", "/retry")  # two replies to one question: the newer is the main line
    lines = _lines(h.run("/tree"))
    assert any("⑂ reply" in line for line in lines)
    main = [line for line in lines if STAR in line]
    assert len(main) == 1 and "◀ you are here" in main[0]
    h.run("/prev")  # on the older reply now: still a branch, the marker stays put
    lines = _lines(h.run("/tree"))
    here = next(line for line in lines if "◀ you are here" in line)
    assert STAR not in here
    assert _indent(lines, "◀ you are here") > _indent(lines, "user: q")


def test_a_batch_is_one_hub_with_a_branch_per_prompt(make_chat):
    h = make_chat(FakeEngine())
    h.run("start", "/batch red | green | blue")
    out = h.run("/tree")
    assert out.count("⑂ batch") == 1 and out.count("⑂ question") == 2
    for colour in ("red", "green", "blue"):
        assert f"user: {colour}" in out


def test_show_here_after_fork_names_the_branch_in_words(make_chat):
    h = make_chat(FakeEngine())
    h.run("hi", "/fork side")
    out = h.run("/up", "/down")
    assert "⑂ fork side" in out and "fork_hub" not in out


def test_an_empty_node_an_app_appended_is_drawn_in_words(make_chat):
    from mp13_context import NodeKind

    h = make_chat(FakeEngine())
    h.run("one")
    reply = h.app.cursor.node_id
    empty = h.app.session.append(reply, NodeKind.PLACEHOLDER)  # e.g. by a wrapper app
    h.run(f"/goto {reply}", "two")
    out = h.run("/tree")
    # the empty node is an older child of the reply: a branch with nothing to say
    assert "echo: one\n" in out and "└── ⑂\n" in out
    assert "placeholder" not in out
    out = h.run(f"/goto {empty.id}")
    assert out.strip() == f"{empty.id[:6]} ·"
