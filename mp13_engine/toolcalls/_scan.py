# SPDX-License-Identifier: Apache-2.0
"""Incremental span terminators: where does a tool-call payload end?

A scanner is created when a span opens and is asked, after every feed,
whether the payload is complete. It keeps its position, so each character is
examined about once however the text is split (no re-scan of the buffer).
Results: ``None`` (need more text), ``("end", payload_end, consume_end)``,
``("cut", payload_end, consume_end)`` (a stop marker or the end of the text
came first: the payload may be truncated), or ``("reject", 0, 0)`` (the opener
was not followed by a bracket: it was ordinary text).
Invariant: the result for a buffer depends only on the buffer's text, never
on how it was split, because complete markers are looked for from positions
that were safe to skip (a partial marker at the tail is looked at again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_OPEN = "([{"
_CLOSE = ")]}"
_NONSPACE = re.compile(r"\S")


def alternation(tags: Sequence[str]) -> str:
    """A regex matching any of the literal ``tags`` (longest first)."""
    return "|".join(re.escape(t) for t in sorted(set(tags), key=len, reverse=True))


class Literals:
    """Literal markers indexed by first character, for the "could this tail start one?" check."""

    def __init__(self, literals: Iterable[str], partials: Sequence[str] = ()) -> None:
        literals = sorted(set(literals))
        self.by_first: dict[str, list[str]] = {}
        for lit in literals:
            self.by_first.setdefault(lit[0], []).append(lit)
        self.keep = max((len(lit) for lit in literals), default=1) - 1
        self.partials = [re.compile(p) for p in partials]

    def hold(self, buf: str, pos: int) -> int:
        """The earliest index >= pos from which ``buf`` may be the start of a marker."""
        n = len(buf)
        best = n
        for i in range(max(pos, n - self.keep), n):
            cands = self.by_first.get(buf[i])
            if cands:
                tail = buf[i:]
                if any(lit.startswith(tail) for lit in cands):
                    best = i
                    break
        for p in self.partials:
            m = p.search(buf, pos)
            if m is not None and m.start() < best:
                best = m.start()
        return best


class TagScan:
    """The payload ends at the first closing tag; a stop marker first means it was cut."""

    def __init__(self, start: int, pattern: tuple[re.Pattern[str], int]) -> None:
        self._re, self._keep = pattern
        self._from = start

    @staticmethod
    def compile(ends: Sequence[str], stops: Sequence[str]) -> tuple[re.Pattern[str], int]:
        """The (regex, longest marker - 1) pair a ``TagScan`` needs; build once per parser."""
        stops = [s for s in stops if s not in ends]
        parts = [f"(?P<e>{alternation(ends)})"]
        if stops:
            parts.append(f"(?P<s>{alternation(stops)})")
        return re.compile("|".join(parts)), max(len(t) for t in (*ends, *stops)) - 1

    def shift(self, n: int) -> None:
        """The buffer lost its first ``n`` characters."""
        self._from = max(0, self._from - n)

    def scan(self, buf: str, final: bool) -> tuple[str, int, int] | None:
        m = self._re.search(buf, self._from)
        if m:
            return ("end" if m.lastgroup == "e" else "cut", m.start(), m.end())
        if final:
            return ("cut", len(buf), len(buf))
        self._from = max(self._from, len(buf) - self._keep)
        return None


def compile_stops(stops: Sequence[str]) -> tuple[re.Pattern[str] | None, Literals]:
    """The stop-marker regex and prefix table a ``BracketScan`` needs; build once per parser."""
    return (re.compile(alternation(stops)) if stops else None), Literals(stops)


class BracketScan:
    """The payload is one balanced bracket value (or one string), optionally after ``after``.

    With ``after``, a payload that starts with a bracket right away is taken as
    is (so ``[TOOL_CALLS][{...}]`` and ``[TOOL_CALLS]name[ARGS]{...}`` both scan).
    """

    def __init__(
        self,
        start: int,
        stops: tuple[re.Pattern[str] | None, Literals],
        *,
        after: str | None = None,
        quotes: str = '"',
    ) -> None:
        self._i = start
        self._after = after
        # -1: a bracket right away, or else find `after`; 0: find `after`; 1: find the
        # bracket; 2: in the value.
        self._phase = -1 if after else 1
        self._depth = 0
        self._quote: str | None = None
        self._quotes = quotes
        self._tok = re.compile("[" + re.escape(_OPEN + _CLOSE + quotes + "\\") + "]")
        self._stop_re, self._stop_lits = stops
        self._stop_keep = self._stop_lits.keep
        self._stop_from = start

    def shift(self, n: int) -> None:
        """The buffer lost its first ``n`` characters."""
        self._i = max(0, self._i - n)
        self._stop_from = max(0, self._stop_from - n)

    def scan(self, buf: str, final: bool) -> tuple[str, int, int] | None:
        stop = None
        if self._stop_re is not None:
            stop = self._stop_re.search(buf, self._stop_from)
            if stop is None:
                self._stop_from = max(self._stop_from, len(buf) - self._stop_keep)
        limit = stop.start() if stop else len(buf)
        if stop is None and not final:
            # Never decide on characters that may begin a stop marker still arriving.
            limit = self._stop_lits.hold(buf, self._i)
        end = self._advance(buf, limit)
        if end == -1:
            return ("reject", 0, 0)
        if end is not None:
            return ("end", end, end)
        if stop is not None:
            return ("cut", stop.start(), stop.end())
        if final:
            return ("cut", len(buf), len(buf))
        return None

    def _advance(self, buf: str, limit: int) -> int | None:
        if self._phase == -1:
            m = _NONSPACE.search(buf, self._i, limit)
            if m is None:
                self._i = max(self._i, limit)
                return None
            self._phase = 1 if m.group() in _OPEN else 0
        if self._phase == 0:
            assert self._after is not None
            idx = buf.find(self._after, self._i, limit)
            if idx < 0:
                self._i = max(self._i, limit - len(self._after) + 1)
                return None
            self._i = idx + len(self._after)
            self._phase = 1
        if self._phase == 1:
            m = _NONSPACE.search(buf, self._i, limit)
            if m is None:
                self._i = max(self._i, limit)
                return None
            if m.group() not in _OPEN and m.group() not in self._quotes:
                return -1  # a JSON-string value (quoted) is accepted: it may encode the arguments
            self._phase = 2
            self._i = m.start()
        i, depth, quote, tok = self._i, self._depth, self._quote, self._tok
        try:
            while True:
                m = tok.search(buf, i, limit)
                if m is None:
                    i = max(i, limit)
                    return None
                ch = m.group()
                j = m.start()
                if quote is not None:
                    if ch == "\\":
                        if j + 1 >= limit:
                            i = j  # look at the escape again once its character is here
                            return None
                        i = j + 2
                        continue
                    if ch == quote:
                        quote = None
                        if depth == 0:
                            i = j + 1
                            return j + 1
                elif ch in self._quotes:
                    quote = ch
                elif ch in _OPEN:
                    depth += 1
                elif ch in _CLOSE:
                    depth -= 1
                    if depth <= 0:
                        i = j + 1
                        return j + 1
                i = j + 1
        finally:
            self._i, self._depth, self._quote = i, depth, quote
