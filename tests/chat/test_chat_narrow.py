# SPDX-License-Identifier: MIT
"""The REPL on a narrow (40-column) terminal: help flows to the width, and what the
commands print fits in it (no line wider than the terminal, nothing cut)."""

from __future__ import annotations

import itertools

from rich.cells import cell_len

import mp13chat
from mp13_context.testing import FakeEngine, FakeReply

WIDTH = 40


def _narrow(make_chat, engine=None, **fields):
    h = make_chat(engine or FakeEngine(), **fields)
    h.console.width = WIDTH
    return h


def _fits(out: str) -> None:
    wide = [line for line in out.splitlines() if cell_len(line) > WIDTH]
    assert not wide, f"lines wider than {WIDTH} columns: {wide}"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _assert_filled(lines: list[str]) -> None:
    """Each line but the last holds as many words as fit: the next line's first word
    would not have fit after it (a docstring's own breaks left short lines)."""
    for line, after in itertools.pairwise(lines):
        assert cell_len(line.rstrip()) + 1 + cell_len(after.split()[0]) > WIDTH, (line, after)


def test_help_of_a_command_is_refilled_to_the_terminal_width(make_chat):
    # Was: the docstring's own line breaks (at ~88 columns), each wrapped again at 40,
    # so every other line held a word or two ("...under the" / "node," / "saying...").
    h = _narrow(make_chat)
    out = h.run("/help tree")
    _fits(out)
    lines = out.splitlines()
    first = lines.index("") if "" in lines else len(lines)
    summary, body = lines[1:first], [line for line in lines[first + 1 :] if line.strip()]
    body = body[: body.index("> /quit")] if "> /quit" in body else body
    _assert_filled(summary)
    _assert_filled(body)
    doc = h.app.commands.resolve("tree").doc
    assert _flat(" ".join(summary + body)) == _flat(doc)  # every word, in order


def test_help_keeps_list_items_and_indented_lines_as_written(make_chat):
    def notes(repl: mp13chat.Repl, line: mp13chat.CommandLine) -> None:
        """Show notes.

        Modes:
        - all: every note that was ever written in this session, oldest first, with
          its time
        - last: the newest note only
            /notes last
        """

    h = _narrow(make_chat)
    h.app.register_command(mp13chat.command("notes", usage="/notes [MODE]")(notes))
    out = h.run("/help notes")
    _fits(out)
    lines = out.splitlines()
    assert "Modes:" in lines  # not joined with the list under it
    item = next(i for i, line in enumerate(lines) if line.startswith("- all:"))
    # the item is re-filled under a hanging indent, up to the next item
    assert lines[item + 1].startswith("  ") and not lines[item + 1].startswith("   ")
    rest = lines[item : lines.index(next(line for line in lines if line.startswith("- last")))]
    assert _flat(" ".join(rest)) == (
        "- all: every note that was ever written in this session, oldest first, with its time"
    )
    assert "    /notes last" in lines  # an indented line keeps its line and indent


def test_help_of_a_group_lists_its_subcommands_whole_when_narrow(make_chat):
    # Was: a three-column table whose summary column was a word wide, its cells cut
    # with "…" ("descriptio…", "always/nev…").
    h = _narrow(make_chat)
    out = h.run("/help tools")
    _fits(out)
    assert "…" not in out
    flat = _flat(out).replace("| ", "|")  # a usage line may break after a bar
    for sub in h.app.commands.resolve("tools").subcommands:
        assert _flat(sub.usage) in flat and _flat(sub.summary) in flat


def test_a_long_usage_line_breaks_after_a_bar_not_inside_a_word(make_chat):
    # Was: rich breaks only at spaces, so "/adapters list|load|...|default|pop" was cut
    # at the last column: "...|base|defau" / "lt|pop ...".
    h = _narrow(make_chat)
    out = h.run("/help adapters")
    _fits(out)
    usage = h.app.commands.resolve("adapters").usage
    lines = list(
        itertools.takewhile(lambda line: line.startswith(("usage: ", " " * 7)), out.splitlines())
    )
    assert lines[0].startswith("usage: /adapters") and len(lines) >= 2
    assert all(line.rstrip().endswith(("|", "/adapters")) for line in lines[:-1])
    joined = "".join(line.removeprefix("usage: ").strip() + " " for line in lines)
    assert joined.replace("| ", "|").split() == usage.split()  # every word whole


def test_help_of_a_group_keeps_its_table_where_it_fits(make_chat):
    h = make_chat(FakeEngine())  # 140 columns
    out = h.run("/help tools")
    assert "what it does" in out and "subcommands:" not in out
    assert "│ List the tools: global mode" in out


def test_wide_tables_become_records_that_keep_every_word(make_chat):
    # Was: rich squeezed each column to a few letters and cut the rest with "…":
    # /tools list read "cal… │ adv… │ adv…", /list's dates "2026-…", /config's meanings
    # ran down the screen a word a line.
    h = _narrow(make_chat)
    h.run("hello there")
    out = h.run("/tools list", "/config", "/list", "/search hello")
    _fits(out)
    assert "…" not in out
    flat = _flat(out)
    for info in h.app.toolbox.list():
        assert f"{info.name} global: advertised" in flat
        assert f"description: {_flat(info.description.splitlines()[0])}" in flat
    conversation = h.app.cursor.conversation_id[:6]
    assert f"▶ {conversation} title: hello there at:" in flat  # the marker in the heading
    assert "model value: None meaning: Model to load: a local folder" in flat
    assert "snippet: hello there" in flat


def test_a_long_value_folds_instead_of_being_cut(make_chat, tmp_path):
    h = _narrow(make_chat, session=str(tmp_path / "a-rather-long-session-file-name.db"))
    out = h.run("/config")
    _fits(out)
    assert "…" not in out
    assert "a-rather-long-session-file-name.db" in "".join(line.strip() for line in out.split())


def test_the_training_bar_puts_its_words_under_it_when_narrow():
    import io

    from rich.console import Console, Group

    from mp13chat._cmd_engine import _TrainingProgress

    def shown(width: int) -> str:
        out = io.StringIO()
        console = Console(file=out, width=width, color_system=None)
        progress = _TrainingProgress(console)
        task = progress.add_task("train", total=2, adapter="tinyad", info="starting")
        progress.update(task, completed=2, info="step 2/2 loss 8.0063 120 tok/s")
        console.print(Group(*progress.get_renderables()))
        return out.getvalue()

    narrow = shown(WIDTH)
    _fits(narrow)
    bar, words = narrow.splitlines()[:2]
    assert "…" not in narrow and "100%" in bar and "0:00:00" in bar  # nothing cut
    assert bar.count("━") >= _TrainingProgress.BAR_MIN
    assert words.strip() == "step 2/2 loss 8.0063 120 tok/s"
    wide = shown(100)  # room for all of it: one line, as before
    assert len(wide.splitlines()) == 1 and "100% step 2/2 loss 8.0063 120 tok/s" in wide


def test_a_streamed_reply_and_its_reasoning_break_between_words(make_chat):
    # Was: plain streamed text (markdown off, a pipe) and streamed reasoning went out
    # delta by delta with no breaks: the terminal cut words at its last column
    # ("divi" / "sion") and a piped transcript held 76-column lines.
    reasoning = "I should compute this with the calculator tool, carefully and exactly."
    reply = "It is 391, and the second one failed because division by zero is undefined."
    h = _narrow(make_chat, FakeEngine([FakeReply(text=reply, reasoning=reasoning)]))
    out = h.run("what is 17*23?")
    _fits(out)
    lines = out.splitlines()
    words = [w for line in lines for w in line.split()]
    for text in (reasoning, reply):
        start = words.index(text.split()[0])
        assert words[start : start + len(text.split())] == text.split()  # no word cut
    assert lines[lines.index("It is 391, and the second one failed") + 1] == (
        "because division by zero is undefined."
    )


def test_control_characters_in_a_streamed_reply_are_counted_as_shown(make_chat):
    # The console shows ESC as "␛", one cell; counted as none, a line of such words
    # came out wider than the terminal.
    reply = " ".join(["word\x1b"] * 24)
    h = _narrow(make_chat, FakeEngine([reply]))
    out = h.run("go")
    _fits(out)
    assert "\x1b" not in out and out.count("word␛") == 24
