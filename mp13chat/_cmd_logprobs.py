# SPDX-License-Identifier: MIT
"""``/logprobs``: how sure the model was of each token of a reply.

The reply is the one at the cursor, else the newest on the branch above it (after a
reply, the cursor is on it), with its ``/continue`` parts joined as ``/history`` joins
them. Its log-probabilities come from the REPL's ``LogprobsState`` (``_logprobs``):
only replies made in this run with ``logprobs`` on have them, and when a reply has none
the command says why and how to get them instead of printing an empty table.
"""

from __future__ import annotations

import math

from rich.text import Text

from mp13_context import Node, Role
from mp13_engine import TokenLogprob
from mp13_toolbox import plural
from mp13chat import _logprobs as lp
from mp13chat import _render as render
from mp13chat._errors import UsageError
from mp13chat._registry import Command, CommandLine, command, parse_int
from mp13chat._repl import Repl
from mp13chat._tree import short


def _complete(repl: Repl, index: int, words: list[str]) -> list[str]:
    return ["all", "low"] if index == 0 else []


def _reply_parts(repl: Repl) -> list[Node]:
    """The nodes of the reply ``/logprobs`` shows, first part first; [] when the branch
    has no reply up to the cursor."""
    turns = [(n, t) for n in repl.cursor.path() if (t := n.turn) is not None]
    while turns and turns[-1][1].role is not Role.ASSISTANT:
        turns.pop()
    if not turns:
        return []
    start = len(turns) - 1
    while start > 0 and turns[start][1].continuation and turns[start - 1][1].role is Role.ASSISTANT:
        start -= 1
    return [n for n, _ in turns[start:]]


def _why_none(repl: Repl) -> str:
    """Why the reply has no log-probabilities, and what gives them."""
    if not repl.cursor.request().logprobs:
        return (
            "this reply has no log-probabilities: they are off. /set logprobs true turns "
            "them on for the next reply (/retry makes this one again); /set top_logprobs 5 "
            "adds each token's likeliest alternatives"
        )
    return (
        "this reply has no log-probabilities: only replies made in this run with logprobs "
        "on have them (a session file does not keep them); /retry makes it again with them"
    )


_FROM = "FROM (a token number; or all, low)"


def _select(
    tokens: list[TokenLogprob], words: list[str]
) -> tuple[list[tuple[int, TokenLogprob]], str | None]:
    """The numbered tokens ``/logprobs WORDS`` shows, and a note on what it left out."""
    numbered = list(enumerate(tokens, start=1))
    if words == ["all"]:
        return numbered, None
    if words == ["low"]:
        return [(i, t) for i, t in numbered if math.exp(t.logprob) < lp.UNSURE], None
    first = parse_int(words[0], _FROM, minimum=1) if words else 1
    count = len(numbered)
    if count and first > count:
        raise UsageError(f"this reply has {plural(count, 'token')}; give FROM up to {count}")
    shown = numbered[first - 1 : first - 1 + lp.PAGE]
    if len(shown) == count:
        return shown, None
    last = first - 1 + len(shown)
    note = f"tokens {first}-{last} of {count}: "
    if last < count:
        note += f"/logprobs {last + 1} shows the next, "
    return shown, note + f"/logprobs all every one, /logprobs low those below {lp.UNSURE:.0%}"


@command("logprobs", group="engine", usage="/logprobs [FROM|all|low]", complete=_complete)
def logprobs(repl: Repl, line: CommandLine) -> None:
    """Show how sure the model was of each token of the reply here.

    A summary line (tokens, mean log-probability, perplexity, how many tokens were
    below 50% and 10%), then one row per token: its text (quoted, with spaces and
    control characters visible), its probability and, with top_logprobs set, its
    likeliest alternatives. Tokens below 50% are yellow, below 10% red. Shows
    40 tokens at a time: /logprobs FROM starts at token FROM, /logprobs all shows
    every token, /logprobs low only those below 50%. Needs /set logprobs true before
    the reply (/set top_logprobs 5 for the alternatives); replies made in an earlier
    run have none. The reply is the one at the cursor, or the last one above it.
    """
    words = line.require_words("FROM, all or low", 0, 1)
    if words and words[0] not in ("all", "low"):  # a bad word is refused first
        parse_int(words[0], _FROM, minimum=1)
    parts = _reply_parts(repl)
    if not parts:
        render.print_info(repl.console, "no reply on this branch yet; ask something first")
        return
    kept = [repl.reply_logprobs.get(n.id) for n in parts]
    if kept[-1] is None:
        render.print_info(repl.console, _why_none(repl))
        return
    # A reply continued after logprobs were turned on has them for its newest parts
    # only: show those, numbered from 1, and say what is missing.
    missing = max((i + 1 for i, part in enumerate(kept) if part is None), default=0)
    tokens = [t for part in kept[missing:] for t in part or ()]
    shown, note = _select(tokens, words)  # a bad FROM is refused before anything shows
    head = Text(f"reply {short(parts[-1].id)}: ", style="bold")
    repl.console.print(head + lp.summary(tokens))
    if missing:
        render.print_info(
            repl.console,
            f"{plural(missing, 'earlier part')} of this reply (before a /continue) had "
            "logprobs off: the table starts after it",
        )
    if not shown and tokens:  # /logprobs low on a sure reply
        render.print_info(repl.console, f"no token below {lp.UNSURE:.0%}")
    if shown:
        decode = lp.engine_decoder(repl.engine)
        repl.console.print(lp.token_table(shown, decode, repl.console.width))
    if note:
        render.print_info(repl.console, note)
    if tokens and not any(t.top_logprobs for t in tokens):
        render.print_info(repl.console, "/set top_logprobs 5 shows each token's alternatives")


COMMANDS: tuple[Command[Repl], ...] = (logprobs,)
