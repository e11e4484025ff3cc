# SPDX-License-Identifier: MIT
"""Log-probabilities of this run's replies: kept by node, summed up, shown as a table.

Concept: with ``logprobs`` on (``/set logprobs true``) the engine returns each reply's
per-token log-probabilities with its ``Response``; the context layer hands that
response to the front end on the reply's ``TURN`` event and stores none of it (a
session file never holds them). ``LogprobsState`` keeps them by node id, for the
newest replies of this run (at most ``KEEP`` replies and ``BUDGET`` tokens, alternatives
counted: a 4,096-token reply with 20 alternatives each is 86,016 of them), so
``/logprobs`` can show a reply after it was printed and the footer can say how sure the
model was (``perplexity``).

Invariants: the state holds at most ``keep`` replies and ``budget`` tokens (the oldest
go first; the newest reply always stays), each a tuple of the engine's frozen
``TokenLogprob``s, exactly as the response gave them.
Token text reaches the console quoted and escaped (``token_label``): whitespace,
control and invisible characters show as ``\\n``, ``\\u200b``..., so a token can
neither move the cursor nor hide from the reader.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable, Sequence

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from mp13_context import Event, EventKind
from mp13_engine import TokenLogprob
from mp13_toolbox import plural

#: How many replies' log-probabilities a run keeps (the newest) ...
KEEP = 64
#: ... and how many tokens in all, alternatives counted (each about 100 bytes).
BUDGET = 250_000
#: Below this probability a token is shown as unsure, below ``LOW`` as unlikely.
UNSURE = 0.5
LOW = 0.1
#: Tokens ``/logprobs`` shows at once (``/logprobs N`` shows the next ones).
PAGE = 40

Logprobs = tuple[TokenLogprob, ...]
#: ``decode(token_id)``: the token's text, or ``None`` when it cannot be had.
Decode = Callable[[int], "str | None"]


class LogprobsState:
    """The log-probabilities of this run's newest replies, by node id (see the module
    docstring for how many)."""

    def __init__(self, keep: int = KEEP, budget: int = BUDGET) -> None:
        self.keep = keep
        self.budget = budget
        self._replies: dict[str, Logprobs] = {}
        self._sizes: dict[str, int] = {}

    def observe(self, event: Event) -> None:
        """Keep what an assistant ``TURN`` event's response carries (the runner's
        events may all pass through here; the others are ignored)."""
        response = event.response
        if event.kind is not EventKind.TURN or response is None or event.node_id is None:
            return
        if response.logprobs is not None:
            self.add(event.node_id, response.logprobs)

    def add(self, node_id: str, logprobs: Logprobs) -> None:
        self._drop(node_id)  # a re-added reply counts as the newest
        self._replies[node_id] = logprobs
        self._sizes[node_id] = sum(1 + len(t.top_logprobs) for t in logprobs)
        while len(self._replies) > 1 and (
            len(self._replies) > self.keep or sum(self._sizes.values()) > self.budget
        ):
            self._drop(next(iter(self._replies)))

    def _drop(self, node_id: str) -> None:
        self._replies.pop(node_id, None)
        self._sizes.pop(node_id, None)

    def get(self, node_id: str) -> Logprobs | None:
        return self._replies.get(node_id)


def mean_logprob(logprobs: Sequence[TokenLogprob]) -> float | None:
    """The mean log-probability of the tokens (``None`` for no tokens)."""
    if not logprobs:
        return None
    return sum(t.logprob for t in logprobs) / len(logprobs)


def perplexity(logprobs: Sequence[TokenLogprob]) -> float | None:
    """``exp(-mean logprob)``: 1 when the model was sure of every token, the number of
    equally likely choices it was torn between on average otherwise."""
    mean = mean_logprob(logprobs)
    return None if mean is None else math.exp(-mean)


def percent(logprob: float) -> str:
    """A probability as a short percentage: ``97.1%``, ``0.42%``, ``<0.01%``."""
    p = math.exp(logprob) * 100
    if p >= 1:
        return f"{p:.1f}%"
    return f"{p:.2f}%" if p >= 0.01 else "<0.01%"


def style_for(logprob: float) -> str:
    """The theme style of a token of this log-probability."""
    p = math.exp(logprob)
    if p < LOW:
        return "mp13.logprob.low"
    return "mp13.logprob.unsure" if p < UNSURE else ""


def _escape(char: str) -> str:
    # Control, format (zero-width, bidi overrides), separators and other spaces than
    # " ": escaped, so a token shows what it holds and cannot reorder or hide text.
    category = unicodedata.category(char)
    if char != " " and (category[0] in "CZ"):
        return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    return char


def token_label(text: str | None, token: int) -> str:
    """A token's text as the table shows it: JSON-quoted with its invisible characters
    escaped (``" the"``, ``"\\n"``); ``#ID`` when the text is not known."""
    if text is None:
        return f"#{token}"
    quoted = json.dumps(text, ensure_ascii=False)  # \n, \t, \", \\ and C0 escaped
    return "".join(_escape(c) for c in quoted)


def engine_decoder(engine: object) -> Decode | None:
    """``engine.tokenizer.decode`` for one token (mp13's ``Engine`` has it; so may a
    wrapper app's engine client), or ``None`` for an engine without a tokenizer."""
    decode = getattr(getattr(engine, "tokenizer", None), "decode", None)
    if not callable(decode):
        return None

    def text(token: int) -> str | None:
        try:
            return str(decode([token]))
        except Exception:  # an id the tokenizer does not know: shown by id
            return None

    return text


def summary(logprobs: Sequence[TokenLogprob]) -> Text:
    """``12 tokens · mean logprob -0.31 · perplexity 1.36 · 3 below 50%, 1 below 10%``."""
    out = Text(plural(len(logprobs), "token"), style="mp13.info")
    mean = mean_logprob(logprobs)
    ppl = perplexity(logprobs)
    if mean is not None and ppl is not None:
        out.append(f" · mean logprob {mean:.2f} · perplexity {ppl:.2f}", style="mp13.info")
    unsure = sum(1 for t in logprobs if math.exp(t.logprob) < UNSURE)
    low = sum(1 for t in logprobs if math.exp(t.logprob) < LOW)
    if unsure:
        out.append(" · ", style="mp13.info")
        out.append(f"{unsure} below {UNSURE:.0%}", style="mp13.logprob.unsure")
        if low:
            out.append(", ", style="mp13.info")
            out.append(f"{low} below {LOW:.0%}", style="mp13.logprob.low")
    return out


def _fill(entries: Sequence[Text], width: int) -> Text:
    """``entries`` joined by ``, `` into lines of at most ``width`` cells, breaking only
    between entries: rich would break a ``"tok" 12%`` entry at its space, leaving the
    percentage of one token at the start of the next line."""
    out = Text()
    used = 0
    for entry in entries:
        size = entry.cell_len
        if used and used + 2 + size > width:
            out.append(",\n")
            used = 0
        elif used:
            out.append(", ")
            used += 2
        out.append_text(entry)
        used += size
    return out


def token_table(
    rows: Sequence[tuple[int, TokenLogprob]], decode: Decode | None, width: int
) -> Table:
    """One row per ``(number, token)``: its text, probability and, when the reply has
    them, its likeliest alternatives (the chosen one bold). Unsure and unlikely tokens
    are styled (``style_for``). On a console ``width`` cells wide the alternatives break
    between entries and long tokens fold, so the table keeps its columns on a narrow
    terminal."""

    def label(token: int) -> str:
        return token_label(decode(token) if decode is not None else None, token)

    with_alternatives = any(t.top_logprobs for _, t in rows)
    out = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    out.add_column("#", justify="right", style="mp13.info", no_wrap=True)
    out.add_column("token", overflow="fold")
    out.add_column("p", justify="right", no_wrap=True)
    labels = [label(t.token) for _, t in rows]
    # What the other columns take (a gap of 2 between columns): what is left is the
    # alternatives' line. A token too long for it folds in its own column.
    taken = len(str(rows[-1][0])) + max(len("token"), *map(cell_len, labels)) + len("<0.01%") + 6
    if with_alternatives:
        out.add_column("alternatives", overflow="fold", style="mp13.info")
    for (number, tok), text in zip(rows, labels, strict=True):
        style = style_for(tok.logprob)
        cells: list[Text] = [
            Text(str(number)),
            Text(text, style=style),
            Text(percent(tok.logprob), style=style),
        ]
        if with_alternatives:
            entries = [
                Text(
                    f"{label(alt.token)} {percent(alt.logprob)}",
                    style="bold" if alt.token == tok.token else "",
                )
                for alt in tok.top_logprobs
            ]
            cells.append(_fill(entries, max(width - taken, 12)))
        out.add_row(*cells)
    return out
