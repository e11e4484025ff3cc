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

``TagScan`` reads a tag-closed payload, which may quote its own closing tag
as text (a JSON string mentioning ``</tool_call>``, an ``<escape>`` region, a
raw parameter value): closing tags inside quoted text do not end the span.
The first one it skipped is kept as ``fallback``: where the span ends when the
guarded reading fails (its payload does not decode, or no clean end came), so
sloppy quoting costs no more than it did without guards.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import attrs

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


class Scanner(abc.ABC):
    """What every scanner keeps: its position, and where its span ends should its reading fail."""

    def __init__(self, start: int) -> None:
        self._i = start
        #: The first closing tag or stop skipped as quoted text: ``(how, start, end)``.
        self.fallback: tuple[str, int, int] | None = None

    def shift(self, n: int) -> None:
        """The buffer lost its first ``n`` characters."""
        self._i = max(0, self._i - n)
        if self.fallback is not None:
            how, a, b = self.fallback
            self.fallback = (how, a - n, b - n)

    @abc.abstractmethod
    def scan(self, buf: str, final: bool) -> tuple[str, int, int] | None:
        """The span's end once it is known (see the module docstring), else None."""


def compile_stops(stops: Sequence[str]) -> tuple[re.Pattern[str] | None, Literals]:
    """The stop-marker regex and prefix table a ``BracketScan`` needs; build once per parser."""
    return (re.compile(alternation(stops)) if stops else None), Literals(stops)


class BracketScan(Scanner):
    """The payload is one balanced bracket value (or one string), optionally after ``after``.

    With ``after``, a payload that starts with a bracket right away is taken as
    is (so ``[TOOL_CALLS][{...}]`` and ``[TOOL_CALLS]name[ARGS]{...}`` both scan),
    and a ``{`` met before ``after`` starts the value (``[TOOL_CALLS]name{...}``).
    A stop marker inside a string of the value is text; the first one is kept as
    ``fallback`` (where the value was cut, should the string never close).
    """

    def __init__(
        self,
        start: int,
        stops: tuple[re.Pattern[str] | None, Literals],
        *,
        after: str | None = None,
        quotes: str = '"',
    ) -> None:
        super().__init__(start)
        self._after = after
        self._after_re = re.compile(re.escape(after) + r"|\{|\s") if after else None
        # -1: a bracket right away, or else find `after`; 0: find `after`; 1: find the
        # bracket; 2: in the value.
        self._phase = -1 if after else 1
        self._depth = 0
        self._quote: str | None = None
        self._quotes = quotes
        self._stop_re, self._stop_lits = stops
        chars = "(?P<c>[" + re.escape(_OPEN + _CLOSE + quotes + "\\") + "])"
        stop_alt = f"(?P<s>{self._stop_re.pattern})|" if self._stop_re is not None else ""
        self._tok = re.compile(stop_alt + chars)

    def scan(self, buf: str, final: bool) -> tuple[str, int, int] | None:
        # Never decide on characters that may begin a stop marker still arriving.
        limit = len(buf) if final else self._stop_lits.hold(buf, self._i)
        if self._phase < 2:
            stop = self._stop_re.search(buf, self._i) if self._stop_re is not None else None
            if self._head(buf, stop.start() if stop is not None else limit):
                return ("reject", 0, 0)
            if self._phase < 2:
                if stop is not None:
                    return ("cut", stop.start(), stop.end())
                return ("cut", len(buf), len(buf)) if final else None
        res = self._value(buf, limit)
        if res is None and final:
            return ("cut", len(buf), len(buf))
        return res

    def _head(self, buf: str, limit: int) -> bool:
        """Advance to the value's first bracket; True when the opener has no payload."""
        if self._phase == -1:
            m = _NONSPACE.search(buf, self._i, limit)
            if m is None:
                self._i = max(self._i, limit)
                return False
            self._phase = 1 if m.group() in _OPEN else 0
        while self._phase == 0:  # one word (the name), then `after` or the value's "{"
            assert self._after is not None and self._after_re is not None
            m = self._after_re.search(buf, self._i, limit)
            if m is None:
                self._i = max(self._i, limit - len(self._after) + 1)
                return False
            if m.group().isspace():
                k = _NONSPACE.search(buf, m.start(), limit)
                rest = buf[k.start() : limit] if k is not None else ""
                if k is None or (len(rest) < len(self._after) and self._after.startswith(rest)):
                    self._i = m.start()  # decide once the next word is here
                    return False
                if not (rest.startswith(self._after) or rest.startswith("{")):
                    return True  # words after the marker: prose, not a call
                self._i = k.start()
                continue
            self._i = m.end() if m.group() == self._after else m.start()
            self._phase = 1
        # Phase 1 here: every way out of phases -1 and 0 above either returns or sets it.
        m = _NONSPACE.search(buf, self._i, limit)
        if m is None:
            self._i = max(self._i, limit)
            return False
        if m.group() not in _OPEN and m.group() not in self._quotes:
            return True  # a JSON-string value (quoted) is accepted: it may encode the arguments
        self._phase = 2
        self._i = m.start()
        return False

    def _value(self, buf: str, limit: int) -> tuple[str, int, int] | None:
        i, depth, quote, tok = self._i, self._depth, self._quote, self._tok
        try:
            while True:
                m = tok.search(buf, i, limit)
                if m is None:
                    i = max(i, limit)
                    return None
                ch = m.group()
                j = m.start()
                if m.lastgroup == "s":
                    if quote is None:
                        i = m.end()
                        return ("cut", j, m.end())
                    if self.fallback is None:
                        self.fallback = ("cut", j, m.end())
                    i = m.end()
                    continue
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
                            return ("end", j + 1, j + 1)
                elif ch in self._quotes:
                    quote = ch
                elif ch in _OPEN:
                    depth += 1
                elif ch in _CLOSE:
                    depth -= 1
                    if depth <= 0:
                        i = j + 1
                        return ("end", j + 1, j + 1)
                i = j + 1
        finally:
            self._i, self._depth, self._quote = i, depth, quote


class TagScan(Scanner):
    """The payload ends at the first closing tag; a stop marker first means it was cut.

    Closing tags and stop markers inside quoted text are text. Quoted text is a
    string opened by one of the pattern's ``quotes`` (a backslash escapes the
    next character inside it, as in JSON and Python) or a *verbatim* region
    between a literal opener and its closer (``<escape>...<escape>``,
    ``<parameter=k>...</parameter>``). Every token is examined once, in order,
    and only when it is complete, so the state never depends on the split.
    """

    def __init__(self, start: int, pattern: TagPattern) -> None:
        super().__init__(start)
        self._p = pattern
        self._quote: str | None = None
        self._closer: str | None = None  # the verbatim region we are in, by its closer

    def scan(self, buf: str, final: bool) -> tuple[str, int, int] | None:
        p = self._p
        while True:
            m = p.regex.search(buf, self._i)
            if m is None:
                if final:
                    return ("cut", len(buf), len(buf))
                # No complete token is left; a marker still arriving starts in the tail.
                self._i = max(self._i, len(buf) - p.literals.keep)
                return None
            tok = m.group()
            self._i = m.end()
            if tok == "\\":
                if self._quote is not None:
                    if m.end() >= len(buf) and not final:
                        self._i = m.start()  # look again once the escaped character is here
                        return None
                    self._i = m.end() + 1
                continue
            if self._closer is not None:
                if tok == self._closer:
                    self._closer = None
                elif tok in p.ends or tok in p.stops:
                    self._skip(tok, m)
                continue
            if tok in p.quotes:
                if self._quote is None:
                    self._quote = tok
                elif tok == self._quote:
                    self._quote = None
                continue
            if self._quote is not None:
                if tok in p.ends or tok in p.stops:
                    self._skip(tok, m)
                continue
            if tok in p.ends:
                return ("end", m.start(), m.end())
            if tok in p.stops:
                return ("cut", m.start(), m.end())
            if tok in p.regions:
                self._closer = p.regions[tok]

    def _skip(self, tok: str, m: re.Match[str]) -> None:
        if self.fallback is None:
            self.fallback = ("end" if tok in self._p.ends else "cut", m.start(), m.end())


@attrs.frozen
class TagPattern:
    """What a ``TagScan`` (or a reasoning block) looks for; build once per parser."""

    regex: re.Pattern[str]
    literals: Literals  # its markers, for "could this tail start one?" (``keep``, ``hold``)
    ends: frozenset[str]
    stops: frozenset[str]
    quotes: str
    regions: Mapping[str, str]

    @classmethod
    def compile(
        cls,
        ends: Sequence[str],
        stops: Sequence[str],
        quotes: str = "",
        verbatim: Sequence[tuple[str, str]] = (),
    ) -> TagPattern:
        stops = [s for s in stops if s not in ends]
        literals = [*ends, *stops, *(t for pair in verbatim for t in pair)]
        if quotes or verbatim:
            parts = [alternation(literals)]
        else:  # unguarded: where a closing tag and a longer stop marker both start, the tag
            parts = [alternation(ends), *([alternation(stops)] if stops else [])]
        if quotes:
            parts.append("[" + re.escape(quotes + "\\") + "]")
        return cls(
            regex=re.compile("|".join(parts)),
            literals=Literals(literals),
            ends=frozenset(ends),
            stops=frozenset(stops),
            quotes=quotes,
            regions=MappingProxyType(dict(verbatim)),
        )
