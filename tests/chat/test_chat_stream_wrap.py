# SPDX-License-Identifier: MIT
"""``StreamWrap``: streamed text broken between words at the console's width, however
the stream is split into deltas."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len

from mp13chat._stream_wrap import StreamWrap

_TEXT = st.text(alphabet=st.sampled_from(list("ab cd\nefghi  漢字.,/")), max_size=300)


def _wrapped(text: str, cuts: list[int], width: int) -> str:
    wrap, out, start = StreamWrap(), [], 0
    for cut in [*sorted({min(c, len(text)) for c in cuts}), len(text)]:
        out.append(wrap.feed(text[start:cut], width))
        start = cut
    return "".join(out) + wrap.flush(width)


@given(_TEXT, st.lists(st.integers(0, 300), max_size=30), st.integers(2, 50))  # 漢 takes two cells
def test_lines_fit_and_nothing_but_spaces_changes(text, cuts, width):
    out = _wrapped(text, cuts, width)
    lines = out.split("\n")
    assert all(cell_len(line) <= width for line in lines)
    assert not any(line.endswith(" ") for line in lines[:-1])  # a break replaces spaces
    assert "".join(out.split()) == "".join(text.split())  # every other character, in order
    assert out.count("\n") >= text.count("\n")  # the text's own line breaks stay


@given(st.lists(st.integers(0, 80), max_size=20))
def test_words_are_never_split_when_they_fit(cuts):
    text = "the quick brown fox jumps over the lazy dog and keeps running far away"
    out = _wrapped(text, cuts, 20)
    assert out.split() == text.split()  # each word whole, in order
    assert out.split("\n")[0] == "the quick brown fox"  # filled: "jumps" did not fit


def test_a_word_is_held_only_until_the_space_after_it():
    wrap = StreamWrap()
    assert wrap.feed("hel", 40) == ""
    assert wrap.feed("lo wor", 40) == "hello"
    assert wrap.feed("ld ", 40) == " world"
    assert wrap.flush(40) == ""
