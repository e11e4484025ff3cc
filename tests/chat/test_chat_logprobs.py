# SPDX-License-Identifier: MIT
"""Log-probabilities in the REPL: the footer's perplexity and ``/logprobs``.

Was: with ``/set logprobs true`` the engine computed every token's log-probability and
the context handed it to the REPL on each reply's ``TURN`` event, but mp13chat showed
nothing of it: a user testing a model could not see how sure it was.

On ``FakeEngine`` a token is a word (``fake_logprobs`` gives the values); a fake with a
``tokenizer`` shows the words as text, as a real engine shows its tokens.
"""

from __future__ import annotations

import math
import re
import zlib

import pytest
from rich.cells import cell_len

from mp13_context.testing import FakeEngine, fake_logprobs
from mp13_engine import TokenLogprob
from mp13chat._logprobs import LogprobsState, percent, perplexity, token_label
from mp13chat._reply import footer

ROW = re.compile(r"^\s*(\d+)\s+(\"(?:[^\"\\]|\\.)*\"|#\d+)\s+(<?[\d.]+%)(.*)$")


def rows(out: str) -> list[tuple[int, str, str, str]]:
    """The token rows /logprobs printed: (number, token, p, alternatives)."""
    found = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            found.append((int(m[1]), m[2], m[3], m[4].strip()))
    return found


class WordTokenizer:
    """Decodes the fake's token ids back to its words (ids it never made: KeyError)."""

    def __init__(self) -> None:
        self.words: dict[int, str] = {}

    def learn(self, text: str) -> None:
        for word in text.split():
            self.words[zlib.crc32(word.encode()) % 50_000] = " " + word

    def decode(self, ids: list[int]) -> str:
        return "".join(self.words[i] for i in ids)


class TokenizingFake(FakeEngine):
    def __init__(self, *replies: str) -> None:
        super().__init__(replies)
        self.tokenizer = WordTokenizer()
        for reply in replies:
            self.tokenizer.learn(reply)


def test_a_reply_without_logprobs_says_how_to_turn_them_on(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/logprobs", "hi", "/logprobs")
    assert "no reply on this branch yet; ask something first" in out
    assert "perplexity" not in out  # no footer figure without logprobs
    assert "they are off. /set logprobs true turns them on" in " ".join(out.split())
    # Turned on after the reply: that reply still has none, and /retry is the way.
    out = " ".join(h.run("/set logprobs true", "/logprobs").split())
    assert "only replies made in this run with logprobs on have them" in out
    assert "/retry makes it again with them" in out


def test_footer_and_logprobs_show_the_reply_tokens(make_chat):
    h = make_chat(FakeEngine(["the sky is blue today"]), params={"logprobs": True})
    out = h.run("why?", "/logprobs")
    expected = fake_logprobs("the sky is blue today")
    ppl = perplexity(expected)
    assert ppl is not None
    assert f"perplexity {ppl:.2f} · stop" in out  # the footer
    mean = sum(t.logprob for t in expected) / len(expected)
    assert f"5 tokens · mean logprob {mean:.2f} · perplexity {ppl:.2f}" in out
    got = rows(out)
    # No tokenizer on this engine: tokens by id; no alternatives asked: no column.
    assert [(n, tok, p) for n, tok, p, _ in got] == [
        (i, f"#{t.token}", percent(t.logprob)) for i, t in enumerate(expected, start=1)
    ]
    assert all(alts == "" for *_, alts in got)
    assert "/set top_logprobs 5 shows each token's alternatives" in out


def test_alternatives_token_text_and_the_unsure_ones(make_chat):
    reply = "one two three four five six seven eight"
    h = make_chat(TokenizingFake(reply), params={"logprobs": True, "top_logprobs": 3})
    first = h.run("count", "/logprobs")
    low = h.run("/logprobs low")
    expected = fake_logprobs(reply, 3)
    got = rows(first)
    assert [tok for _, tok, _, _ in got] == [f'" {w}"' for w in reply.split()]
    for (_, _, _, alts), tok in zip(got, expected, strict=True):
        # Each alternative with its percentage; the fake's others have no text: by id.
        for alt in tok.top_logprobs:
            assert percent(alt.logprob) in alts
        assert alts.count("%") == len(tok.top_logprobs)
    assert "/set top_logprobs" not in first  # they were asked for
    unsure = [i for i, t in enumerate(expected, start=1) if math.exp(t.logprob) < 0.5]
    assert unsure  # the fake's values for this reply have some
    assert [n for n, *_ in rows(low)] == unsure
    summary = f"{len(unsure)} below 50%"
    assert summary in first


def test_long_replies_are_paged_with_a_note(make_chat):
    reply = " ".join(f"w{i}" for i in range(1, 96))
    h = make_chat(FakeEngine([reply]), params={"logprobs": True})
    out = h.run("go", "/logprobs")
    assert [n for n, *_ in rows(out)] == list(range(1, 41))
    assert "tokens 1-40 of 95: /logprobs 41 shows the next" in " ".join(out.split())
    out = h.run("/logprobs 41")
    assert [n for n, *_ in rows(out)] == list(range(41, 81))
    out = h.run("/logprobs 81")
    assert [n for n, *_ in rows(out)] == list(range(81, 96))
    assert "/logprobs 96" not in out  # nothing after the last page
    assert [n for n, *_ in rows(h.run("/logprobs all"))] == list(range(1, 96))
    out = " ".join(h.run("/logprobs 96", "/logprobs nine").split())
    assert "error: this reply has 95 tokens; give FROM up to 95" in out
    assert "must be a whole number, got 'nine'" in out
    assert not rows(out)  # a refused page shows nothing else


def test_tokens_are_quoted_with_invisible_characters_escaped(make_chat):
    engine = TokenizingFake("a b c d")
    engine.tokenizer.words = {
        zlib.crc32(b"a") % 50_000: "\n",
        zlib.crc32(b"b") % 50_000: "\x1b[2J",
        zlib.crc32(b"c") % 50_000: "\u202eevil",
        zlib.crc32(b"d") % 50_000: ' say "hi"\t',
    }
    h = make_chat(engine, params={"logprobs": True})
    out = h.run("x", "/logprobs")
    assert [tok for _, tok, _, _ in rows(out)] == [
        '"\\n"',
        '"\\u001b[2J"',
        '"\\u202eevil"',
        '" say \\"hi\\"\\t"',
    ]
    assert "\x1b" not in out and "\u202e" not in out


def test_a_narrow_terminal_keeps_the_table_readable(make_chat):
    reply = "alpha beta gamma delta epsilon"
    h = make_chat(TokenizingFake(reply), params={"logprobs": True, "top_logprobs": 5})
    h.console.width = 40
    out = h.run("greek", "/logprobs")
    assert all(cell_len(line) <= 40 for line in out.splitlines())
    got = rows(out)
    assert [tok for _, tok, _, _ in got] == [f'" {w}"' for w in reply.split()]
    # The alternatives break between entries, never inside "#ID NN.N%".
    table = out[out.index("alternatives") :]
    for tok in fake_logprobs(reply, 5):
        for alt in tok.top_logprobs:
            if alt.token != tok.token:
                assert f"#{alt.token} {percent(alt.logprob)}" in table


def test_history_footers_keep_the_perplexity_of_this_runs_replies(make_chat):
    h = make_chat(FakeEngine(), params={"logprobs": True})
    h.run("/unset logprobs", "first", "/set logprobs true", "second")
    out = h.run("/history")
    ppl = perplexity(fake_logprobs("echo: second"))
    assert ppl is not None
    footers = [line for line in out.splitlines() if line.startswith("2 tokens")]
    assert len(footers) == 2
    assert "perplexity" not in footers[0] and f"perplexity {ppl:.2f}" in footers[1]


def test_a_continued_reply_is_shown_whole(make_chat):
    h = make_chat(FakeEngine(), params={"logprobs": True, "max_new_tokens": 64})
    out = h.run("hi", "/continue", "/logprobs")
    whole = fake_logprobs("echo: hi") + fake_logprobs("(more)")
    assert "3 tokens · mean logprob" in out.split("/logprobs")[-1]
    assert [p for _, _, p, _ in rows(out)] == [percent(t.logprob) for t in whole]


def test_batch_replies_keep_their_logprobs(make_chat):
    h = make_chat(FakeEngine(), params={"logprobs": True})
    out = h.run("/batch first one | second one two")
    for text in ("echo: first one", "echo: second one two"):
        ppl = perplexity(fake_logprobs(text))
        assert ppl is not None and f"perplexity {ppl:.2f}" in out
    replies = [
        n
        for n in h.app.session.conversation_nodes(h.app.cursor.conversation_id)
        if n.turn is not None and n.turn.role.value == "assistant"
    ]
    assert len(replies) == 2
    out = h.run(f"/goto {replies[1].id}", "/logprobs")
    assert [p for _, _, p, _ in rows(out)] == [
        percent(t.logprob) for t in fake_logprobs(replies[1].turn.text)
    ]


def test_the_state_keeps_the_newest_replies_only():
    state = LogprobsState(keep=2)
    tokens = (TokenLogprob(1, -0.5),)
    for node in ("a", "b", "c"):
        state.add(node, tokens)
    assert state.get("a") is None and state.get("b") == tokens and state.get("c") == tokens
    # Long replies count by their tokens and alternatives: the oldest go first, the
    # newest stays even when it alone is over the budget.
    state = LogprobsState(budget=10)
    four = tuple(TokenLogprob(i, -1.0, [TokenLogprob(i, -1.0)]) for i in range(2))
    state.add("a", four)
    state.add("b", four)
    state.add("c", four)
    assert [state.get(n) is not None for n in "abc"] == [False, True, True]
    state.add("big", four * 6)
    assert [state.get(n) is not None for n in ("b", "c", "big")] == [False, False, True]


@pytest.mark.parametrize(
    ("logprob", "shown"), [(0.0, "100.0%"), (math.log(0.042), "4.2%"), (-20.0, "<0.01%")]
)
def test_percent(logprob, shown):
    assert percent(logprob) == shown


def test_token_label_without_text_is_the_id():
    assert token_label(None, 17) == "#17"
    assert token_label("\u00a0x", 1) == '"\\u00a0x"'  # a no-break space is not a space


def test_footer_says_the_perplexity_only_with_logprobs():
    from mp13_context import Role, Turn

    turn = Turn(role=Role.ASSISTANT, text="x")
    assert "perplexity" not in footer(turn).plain
    assert "perplexity 2.00" in footer(turn, (TokenLogprob(1, -math.log(2)),)).plain


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    pytest.importorskip("torch")
    from mp13_engine import Engine
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", family="chatml", seed=0)
    engine = Engine.load(str(path), device="cpu", dtype="float32")
    yield engine
    engine.close()


def test_on_a_real_engine_the_rows_are_the_tokenizers_tokens(make_chat, tiny_engine):
    params = {"max_new_tokens": 6, "logprobs": True, "top_logprobs": 2}
    h = make_chat(tiny_engine, params=params)
    out = h.run("hello", "/logprobs")
    reply = h.app.cursor.node
    kept = h.app.reply_logprobs.get(reply.id)
    assert kept is not None and reply.turn is not None and reply.turn.metrics is not None
    assert len(kept) == reply.turn.metrics.completion_tokens
    ppl = perplexity(kept)
    assert ppl is not None and f"perplexity {ppl:.2f}" in out  # footer and summary
    decode = tiny_engine.tokenizer.decode
    got = rows(out)
    assert [(n, tok, p) for n, tok, p, _ in got] == [
        (i, token_label(decode([t.token]), t.token), percent(t.logprob))
        for i, t in enumerate(kept, start=1)
    ]
    for (*_, alts), t in zip(got, kept, strict=True):
        assert alts.count("%") == len(t.top_logprobs) == 2
