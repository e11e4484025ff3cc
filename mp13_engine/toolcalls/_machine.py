# SPDX-License-Identifier: Apache-2.0
"""The one incremental parser that runs every format's ``Profile``.

Modes: ``text`` (scan for the earliest marker: reasoning open, tool opener,
stop / wrapper token), ``reasoning`` (until the block's closing tag), ``span``
(a tool payload until its scanner says it ended) and ``undecided`` (formats
whose template may open ``<think>`` in the prompt: hold the leading text until
an opening or closing reasoning tag, or the end, decides what it was).

Invariants:
- ``parse(text)`` is ``feed(text)`` + ``finish()`` on this machine, and every
  decision depends only on text already seen that cannot change (a possible
  marker prefix at the tail is held back), so any split of a text into deltas
  gives the same final result.
- Each feed looks only at the new text plus a held-back tail shorter than the
  longest marker; open spans are scanned incrementally by their scanner.
- Model output never raises: decoder failures of any kind (any exception but
  the caller's ``KeyboardInterrupt``, and a result that is not a list of
  ``ToolCall``: a user format's decoder may return anything) become an error
  line, and the span's raw text stays in the content.
- A span whose scanner skipped a closing tag as quoted text (``Opener.quoted``,
  ``verbatim``) and whose payload then fails to decode ends at that first tag
  instead, and is decoded (or rejected) from there: guarding closing tags can
  only add calls, never swallow the text after a badly quoted one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._profile import DecodeContext, Decoder, Opener, Profile, Switch
from mp13_engine.toolcalls._scan import (
    BracketScan,
    Literals,
    Scanner,
    TagPattern,
    TagScan,
    alternation,
    compile_stops,
)
from mp13_engine.toolcalls._types import (
    ContentDelta,
    ParsedOutput,
    ReasoningDelta,
    StreamEvent,
    ToolCallCompleted,
    require_text,
)
from mp13_engine.toolcalls._values import PayloadError, ToolLike, tool_schemas
from mp13_toolbox import ToolCall

_CONTENT, _REASONING = 0, 1


def _described(exc: BaseException) -> str:
    try:
        detail = str(exc)
    except Exception:  # an exception whose __str__ fails is still described
        detail = "(no message)"
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


@attrs.define
class _Span:
    """An open tool-call span: where its raw text and payload start, and its scanner."""

    opener: Opener
    opener_text: str
    raw_start: int
    payload_start: int
    scanner: Scanner
    decode: Decoder | None  # None only from a profile bug: the span then fails to decode


class StreamMachine:
    """Incremental parser state for one output of one format (see the module docstring)."""

    def __init__(
        self,
        profile: Profile,
        tools: Iterable[ToolLike] | None = None,
        in_reasoning: bool | None = None,
    ):
        if in_reasoning is not None and not isinstance(in_reasoning, bool):
            raise ToolFormatError(
                f"in_reasoning is True, False or None (detect it), not {in_reasoning!r}"
            )
        p = profile
        self._p = p
        self._schemas = tool_schemas(tools)
        self._buf = ""
        self._pos = 0
        self._base = 0  # absolute offset of self._buf[0], for error messages
        self._events: list[StreamEvent] = []
        self._parts: tuple[list[str], list[str]] = ([], [])
        self._pending = ["", ""]  # trailing whitespace not yet known to be inner
        self._started = [False, False]
        self._calls: list[ToolCall] = []
        self._errors: list[str] = []
        self._span: _Span | None = None
        self._done = False

        opens = [o for o, _ in p.reasoning]
        closes = [c for _, c in p.reasoning]
        drops = sorted(set(p.stops) | set(p.wrappers) | set(closes), key=len, reverse=True)
        alts = [f"(?P<r{i}>{re.escape(o)})" for i, o in enumerate(opens)]
        alts += [f"(?P<o{i}>{o.source()})" for i, o in enumerate(p.openers) if not o.regex]
        if drops:
            alts.append(f"(?P<s>{alternation(drops)})")
        alts += [f"(?P<o{i}>{o.source()})" for i, o in enumerate(p.openers) if o.regex]
        self._text_re = re.compile("|".join(alts)) if alts else None
        self._text_lits = Literals(
            [*opens, *drops, *(o.pattern for o in p.openers if not o.regex)],
            [o.partial for o in p.openers if o.regex and o.partial],
        )
        self._modes = {
            "text": self._text,
            "reasoning": self._reasoning,
            "span": self._span_step,
            "undecided": self._undecided,
        }
        # Span and reasoning patterns, compiled once per parser, not once per span.
        self._tag_patterns: dict[tuple[Any, ...], TagPattern] = {}
        self._stop_pattern = compile_stops(p.stops)
        self._reason: TagPattern | None = None
        if in_reasoning is None:
            self._mode = "undecided" if p.close_only_reasoning and p.reasoning else "text"
        elif in_reasoning and p.reasoning:
            self._enter_reasoning((p.reasoning[0][1],))
        else:
            self._mode = "text"
        if self._mode == "undecided":
            self._und_re = re.compile(f"(?P<c>{alternation(closes)})|(?P<r>{alternation(opens)})")
            self._und_keep = max(len(t) for t in (*opens, *closes)) - 1
            self._und_from = 0

    # -- public surface (``StreamParser``) ------------------------------------------------------

    def feed(self, delta: str) -> list[StreamEvent]:
        """Events (content / reasoning deltas, completed calls) that ``delta`` made certain.

        Text fed after the output ended (``close``/``finish``) would be lost, so it raises
        ``ToolFormatError``: one parser reads one output."""
        require_text(delta, "the model output a tool-call parser reads")
        if delta and self._done:
            raise ToolFormatError(
                "this parser's output has ended (close() or finish() was called), so it "
                f"cannot read {delta[:40]!r}; start a new StreamParser for another output"
            )
        if delta:
            self._buf += delta
            self._run(final=False)
        events, self._events = self._events, []
        return events

    def close(self) -> list[StreamEvent]:
        """End of output: the events still held back (idempotent)."""
        if not self._done:
            self._run(final=True)
            self._done = True
        events, self._events = self._events, []
        return events

    def finish(self) -> ParsedOutput:
        """End of output (``close`` if not done) and the whole result."""
        self.close()
        return ParsedOutput(
            content="".join(self._parts[_CONTENT]),
            reasoning="".join(self._parts[_REASONING]),
            tool_calls=tuple(self._calls),
            errors=tuple(self._errors),
        )

    def salvage(self) -> list[StreamEvent]:
        """After this parser raised (a bug, e.g. in a registered format's decoder): the
        events it made but never handed out, then the text it still held back (a partial
        marker, an open span, undecided text) as content, so the output loses nothing.
        The parser takes no more input; after a clean ``close`` there is nothing left."""
        if self._done:  # it closed cleanly: everything was handed out already
            return []
        self._done = True
        events, self._events = self._events, []
        held = self._pending[_CONTENT] + self._buf[self._pos :]
        self._pending[_CONTENT] = ""
        self._buf, self._pos = "", 0
        if held:
            events.append(ContentDelta(held))
        return events

    # -- the loop -----------------------------------------------------------------------------

    def _run(self, final: bool) -> None:
        while self._modes[self._mode](final):
            pass
        shift = self._pos
        if shift:
            self._buf = self._buf[shift:]
            self._base += shift
            if self._span is not None:
                self._span.raw_start -= shift
                self._span.payload_start -= shift
                self._span.scanner.shift(shift)
            # Never "undecided" here: that mode consumes nothing until it ends, so _und_from
            # never needs shifting.
            self._pos = 0

    # -- emission -----------------------------------------------------------------------------

    def _emit(self, kind: int, text: str) -> None:
        if not text:
            return
        if not self._started[kind]:
            text = text.lstrip()
            if not text:
                return
            self._started[kind] = True
        body = text.rstrip()
        if not body:
            self._pending[kind] += text
            return
        out = self._pending[kind] + body
        self._pending[kind] = text[len(body) :]
        self._parts[kind].append(out)
        self._events.append(ContentDelta(out) if kind == _CONTENT else ReasoningDelta(out))

    def _emit_until(
        self, kind: int, marker: re.Pattern[str] | None, lits: Literals, final: bool
    ) -> re.Match[str] | None:
        """Emit ``kind`` text up to the next ``marker`` (returned, not consumed), or else as
        far as no marker can still be arriving (``None``)."""
        buf, pos = self._buf, self._pos
        m = marker.search(buf, pos) if marker is not None else None
        end = m.start() if m is not None else len(buf) if final else lits.hold(buf, pos)
        self._emit(kind, buf[pos:end])
        if m is None:
            self._pos = end
        return m

    def _error(self, where: int, reason: str, kept: str = "the text was kept") -> None:
        self._errors.append(
            f"{self._p.name}: {reason} (tool-call markup at offset {self._base + where}); "
            f"no call was made and {kept} as content"
        )

    # -- modes --------------------------------------------------------------------------------

    def _text(self, final: bool) -> bool:
        m = self._emit_until(_CONTENT, self._text_re, self._text_lits, final)
        if m is None:
            return False
        group = m.lastgroup or "s"
        if group == "s":
            self._pos = m.end()
        elif group[0] == "r":
            self._pos = m.end()
            self._enter_reasoning((self._p.reasoning[int(group[1:])][1],))
        else:
            self._open_span(self._p.openers[int(group[1:])], m)
        return True

    def _enter_reasoning(self, closes: Sequence[str]) -> None:
        # A reasoning block ends like a tag-closed span: at a closing tag, or cut by a stop.
        self._reason = self._tag_pattern(tuple(closes))
        self._mode = "reasoning"

    def _tag_pattern(
        self, ends: tuple[str, ...], quoted: str = "", verbatim: tuple[tuple[str, str], ...] = ()
    ) -> TagPattern:
        key = (ends, quoted, verbatim)
        if key not in self._tag_patterns:
            self._tag_patterns[key] = TagPattern.compile(ends, self._p.stops, quoted, verbatim)
        return self._tag_patterns[key]

    def _reasoning(self, final: bool) -> bool:
        assert self._reason is not None
        m = self._emit_until(_REASONING, self._reason.regex, self._reason.literals, final)
        if m is None:
            return False
        self._pos = m.end()
        if m.group() in self._reason.ends:
            self._mode = "text"
            if self._started[_REASONING] and not self._pending[_REASONING]:
                self._pending[_REASONING] = "\n"
        return True

    def _undecided(self, final: bool) -> bool:
        buf, pos = self._buf, self._pos
        m = self._und_re.search(buf, max(pos, self._und_from))
        if m is not None and m.lastgroup == "c":
            region = buf[pos : m.start()]
            if self._p.stops:
                region = re.sub(alternation(self._p.stops), "", region)
            self._emit(_REASONING, region)
            if self._started[_REASONING]:
                self._pending[_REASONING] = "\n"
            self._pos = m.end()
            self._mode = "text"
            return True
        if m is not None or final:
            self._mode = "text"
            return True
        self._und_from = max(pos, len(buf) - self._und_keep)
        return False

    def _open_span(self, opener: Opener, m: re.Match[str]) -> None:
        text = m.group()
        start = m.end()
        if opener.keep_from is not None and opener.keep_from in text:
            start = m.start() + text.index(opener.keep_from)
        scanner: Scanner
        if opener.ends:
            pattern = self._tag_pattern(opener.ends, opener.quoted, opener.verbatim)
            scanner = TagScan(m.end(), pattern)
        else:
            scanner = BracketScan(
                start, self._stop_pattern, after=opener.after, quotes=opener.quotes
            )
        self._span = _Span(opener, text, m.start(), start, scanner, self._p.decode)
        self._pos = m.start()
        self._mode = "span"

    def _span_step(self, final: bool) -> bool:
        span = self._span
        assert span is not None
        buf = self._buf
        res = span.scanner.scan(buf, final)
        if res is None:
            return False
        how, payload_end, consume_end = res
        self._span = None
        self._mode = "text"
        raw_start = span.raw_start
        if how == "reject":
            # Not a call after all: a plain-word opener is content, a special token is dropped.
            opener_end = raw_start + len(span.opener_text)
            if span.opener_text not in self._p.wrappers:
                self._emit(_CONTENT, buf[raw_start:opener_end])
            else:
                reason = f"{span.opener_text} is not followed by a payload"
                self._error(raw_start, reason, "the marker was dropped, the text after it kept")
            self._pos = opener_end
            return True
        result = self._decode(span, buf, how, payload_end)
        fallback = span.scanner.fallback
        if isinstance(result, str) and fallback is not None and fallback[1] < payload_end:
            # A closing tag was read as quoted text, and the longer payload does not decode:
            # the quoting was the model's mistake, so the span ends at that tag after all.
            how, payload_end, consume_end = fallback
            result = self._decode(span, buf, how, payload_end)
        self._pos = consume_end
        if isinstance(result, str):
            self._error(raw_start, result)
            self._emit(_CONTENT, buf[raw_start : consume_end if how == "end" else payload_end])
            return True
        if isinstance(result, Switch):
            self._switch(result, raw_start, consume_end)
            return True
        for call in result:
            self._events.append(ToolCallCompleted(call, len(self._calls)))
            self._calls.append(call)
        return True

    def _decode(self, span: _Span, buf: str, how: str, payload_end: int) -> Any:
        """The decoder's calls (or ``Switch``) for a span, or the reason it failed (a str)."""
        if how == "cut" and not self._p.lenient_eof:
            return "truncated tool call: its closing marker never came"
        payload = buf[span.payload_start : payload_end]
        ctx = DecodeContext(self._schemas, span.opener, span.opener_text, truncated=how == "cut")
        try:
            if span.decode is None:
                raise PayloadError("the format switched to a tool span without a decoder")
            result = span.decode(payload, ctx)
            if not isinstance(result, Switch) and not result:
                raise PayloadError("no tool call in the markup")
        except PayloadError as exc:
            return f"{'truncated' if how == 'cut' else 'malformed'} tool call: {exc}"
        except KeyboardInterrupt:  # the user's Ctrl+C while a caller parses: theirs to handle
            raise
        except BaseException as exc:  # a decoder bug (a user format's too: SystemExit) is
            return f"could not decode tool call ({_described(exc)})"  # reported, not raised
        if isinstance(result, Switch):
            return result
        calls = [result] if isinstance(result, ToolCall) else result
        if not isinstance(calls, (list, tuple)) or not all(isinstance(c, ToolCall) for c in calls):
            what = type(calls).__name__
            if isinstance(calls, (list, tuple)):
                odd = next(c for c in calls if not isinstance(c, ToolCall))
                what = f"a {what} holding {type(odd).__name__}"
            return (
                f"could not decode tool call: the {self._p.name!r} decoder returned {what}, "
                "not a list of mp13_toolbox.ToolCall (fix the format's decode function)"
            )
        return list(calls)

    def _switch(self, switch: Switch, raw_start: int, consume_end: int) -> None:
        if switch.mode == "reasoning":
            self._enter_reasoning(switch.closes)
        elif switch.mode == "span":
            scanner = TagScan(consume_end, self._tag_pattern(switch.closes, switch.quoted))
            opener = Opener("", ends=switch.closes, quoted=switch.quoted)
            self._span = _Span(opener, "", raw_start, consume_end, scanner, switch.decode)
            self._pos = raw_start
            self._mode = "span"
