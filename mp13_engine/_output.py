# SPDX-License-Identifier: Apache-2.0
"""One output processor per request: detokenize, match stop strings and parse tool calls once.

A request's generated token ids become text in exactly one place. The
``OutputProcessor`` of a request, driven on the worker thread one token at a
time (through ``RequestState.append`` in ``_streams``), chains three stages:

1. ``Detokenizer``: one decode call per token over a short window of recent
   ids; text is released only when complete (no partial UTF-8 character).
2. ``StopMatcher``: text that could still start a stop string is held back
   until it is known not to be one; the first stop string ends the output and
   nothing from it on is released, also when it is split across tokens.
3. The tool-call ``StreamParser`` of the engine's format (when the engine has
   one and the request parses tools), fed only released text; its events
   become the pieces of content, reasoning and completed tool calls.

The streamed chunks and the final ``Response`` fields come from the same
pieces: the concatenation of every chunk's ``text`` is ``Response.text``, of
``reasoning`` is ``Response.reasoning``, the streamed ``tool_call`` values are
``Response.tool_calls``, and ``raw_text`` is the released raw text (cut at the
first stop string). ``raw_text`` keeps the special tokens the chat template
writes and drops the others (the engine's decode function,
``TokenizerGuard.decode``, does that).

``RequestStatus`` is a request's one lifecycle value, ordered: a status never
goes back. ``RequestStatus.ended(reason)`` and ``status.finish_reason`` are the
one map between finished statuses and ``FinishReason``.

Invariants: a parser never raises on model output; if one does anyway, the
processor logs it, records a parse error and keeps the rest of the output as
text (so a bug cannot lose a reply). Nothing here imports torch.
"""

from __future__ import annotations

import bisect
import enum
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import attrs

from mp13_engine._tool_format import ToolCallFormat
from mp13_engine._types import Chunk, FinishReason, Request, Response
from mp13_engine.toolcalls import (
    ContentDelta,
    ReasoningDelta,
    StreamEvent,
    StreamParser,
    ToolCallCompleted,
)
from mp13_toolbox import ToolCall

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Token ids kept before the decode window's first released token. Decoding a
#: window that starts mid-text must render its first tokens the way the full
#: text does (SentencePiece drops a leading space only at the very start).
_CONTEXT = 6
#: The window slides (one extra decode) once it holds this many ids, so a
#: token costs about ``1 + 1 / (_SLIDE - _CONTEXT)`` decode calls.
_SLIDE = 24
#: Ids that may wait for a character to complete. A character has at most 4
#: bytes and a token at least one, so waiting longer only happens on invalid
#: bytes; releasing them (as U+FFFD) then keeps the window, and the cost, bounded.
_PENDING = 16
#: Up to this many stop strings, ``StopMatcher`` searches a delta for each; beyond,
#: by its sorted index (measured: the index costs the same from 2 stops, less from 8).
_SCAN_STOPS = 4


class RequestStatus(enum.IntEnum):
    """Where a request is in its life (ordered: a request's status only increases)."""

    WAITING = 0  # prepared or queued; not admitted to a batch yet
    RUNNING = 1  # admitted; the worker appends its tokens
    CANCELLING = 2  # cancel asked before it ended; resolved by Engine.cancel or the next step
    FINISHED_STOPPED = 3  # end-of-sequence token or stop string
    FINISHED_LENGTH = 4  # max_new_tokens (or the context window) reached
    FINISHED_CANCELLED = 5
    FINISHED_ERROR = 6

    @property
    def finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> FinishReason | None:
        """The ``FinishReason`` of a finished status (None while the request is alive)."""
        return _REASON_OF.get(self)

    @staticmethod
    def ended(reason: FinishReason) -> RequestStatus:
        """The finished status that ``reason`` stands for."""
        return _STATUS_OF[reason]


_REASON_OF = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_CANCELLED: FinishReason.CANCELLED,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}
_STATUS_OF = {reason: status for status, reason in _REASON_OF.items()}


class Detokenizer:
    """Token ids in, text deltas out, with one decode call per token (amortized).

    Keeps the ids since the window start and the text of those already
    released; each push decodes the window and releases what grew past that
    text, unless it ends inside a character (U+FFFD). Deltas concatenate to the
    decode of all ids (up to a tokenizer's clean-up quirks, as for any
    incremental detokenizer); ``flush`` releases the rest, partial or not.
    """

    __slots__ = ("_decode", "_done", "_text", "_window")

    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self._window: list[int] = []
        self._done = 0  # ids of the window whose text is released
        self._text = ""  # decode(window[:done])

    def push(self, token: int) -> str:
        window = self._window
        window.append(token)
        text = self._decode(window)
        if len(text) <= len(self._text):
            return ""
        if text.endswith("\ufffd") and len(window) - self._done < _PENDING:
            return ""
        delta = text[len(self._text) :]
        if len(window) >= _SLIDE:
            del window[:-_CONTEXT]
            text = self._decode(window)
        self._text = text
        self._done = len(window)
        return delta

    def flush(self) -> str:
        """The text of ids not released yet (the end of the output: partial characters too)."""
        if self._done == len(self._window):
            return ""
        text = self._decode(self._window)
        delta = text[len(self._text) :] if len(text) > len(self._text) else ""
        self._text, self._done = text, len(self._window)
        return delta


class StopIndex:
    """A request's stop strings, ready to match: what ``StopMatcher`` reads, never changes.

    Built once per request when it is submitted (``OutputSetup.stop_index``, on the
    submitting thread), so sorting many stop strings never stalls the worker's step
    that admits the request (100,000 stops sort in about 0.1-0.2 s). Immutable, so
    any thread may build it and the worker read it.
    """

    __slots__ = ("chars", "indexed", "lengths", "longest", "sorted", "stops", "whole")

    def __init__(self, stops: tuple[str, ...], *, indexed: bool | None = None):
        """``stops``: non-empty strings, at least one. ``indexed``: search by the sorted
        index (None: when there are more than ``_SCAN_STOPS``); the tests force each way."""
        self.stops = stops
        self.longest = max(map(len, stops))
        self.chars = frozenset("".join(stops))
        self.indexed = len(stops) > _SCAN_STOPS if indexed is None else indexed
        self.whole: frozenset[str] = frozenset(stops) if self.indexed else frozenset()
        self.sorted = sorted(self.whole)
        self.lengths = frozenset(map(len, self.whole))

    @classmethod
    def of(cls, stops: tuple[str, ...]) -> StopIndex | None:
        """The index of the non-empty strings of ``stops``; None when there are none."""
        kept = tuple(filter(None, stops))
        return cls(kept) if kept else None


class StopMatcher:
    """Releases text up to the first stop string; holds back what could still start one.

    ``feed`` sees ``tail``: the held text (a suffix of the output that is a proper
    prefix of some stop string, so it holds no whole stop) plus the new delta. The
    first stop string of ``tail`` (the earliest start, when one delta completes
    two) ends the output; else the longest suffix of ``tail`` that could still
    start a stop string is held back and the rest released.

    Up to ``_SCAN_STOPS`` stop strings, each delta is searched for each of them
    (the common case: one stop, a few C-level ``find`` calls). More, and a delta
    costs a few binary searches per character in the sorted stop strings instead,
    so 10,000 stops cost a token about what ten do (``_index_search``).
    """

    __slots__ = ("_ix", "_tail", "hit")

    def __init__(self, stops: tuple[str, ...] | StopIndex, *, indexed: bool | None = None):
        """``stops``: the strings, or their ``StopIndex`` built beforehand (then this
        costs nothing more). ``indexed``: as ``StopIndex`` (strings only)."""
        self._ix = stops if isinstance(stops, StopIndex) else StopIndex(stops, indexed=indexed)
        self._tail = ""  # unreleased text: a suffix that is a prefix of some stop string
        self.hit = False

    def feed(self, delta: str) -> str:
        """The text ``delta`` makes safe to release; sets ``hit`` when a stop string completed."""
        if self.hit or not delta:
            return ""
        # The held tail is shorter than the longest stop string, so this search is short
        # and finds only matches that end in ``delta``.
        tail = self._tail + delta
        if self._ix.indexed:
            cut, keep = self._index_search(tail, len(self._tail))
        else:
            cut, keep = self._scan(tail)
        if cut >= 0:
            self.hit = True
            self._tail = ""
            return tail[:cut]
        self._tail = tail[len(tail) - keep :]
        return tail[: len(tail) - keep]

    def flush(self) -> str:
        """The held-back text (the output ended without completing a stop string)."""
        rest, self._tail = self._tail, ""
        return "" if self.hit else rest

    def _scan(self, tail: str) -> tuple[int, int]:
        """(where the first stop string starts or -1, how many last characters to hold)."""
        cut = -1
        for stop in self._ix.stops:
            at = tail.find(stop)
            if at >= 0 and (cut < 0 or at < cut):
                cut = at
        return (cut, 0) if cut >= 0 else (-1, self._held(tail))

    def _held(self, tail: str) -> int:
        ix = self._ix
        if tail[-1] not in ix.chars:  # every candidate suffix ends with this character
            return 0
        for k in range(min(len(tail), ix.longest - 1), 0, -1):
            suffix = tail[-k:]
            if any(stop.startswith(suffix) for stop in ix.stops):
                return k
        return 0

    def _index_search(self, tail: str, held: int) -> tuple[int, int]:
        """``_scan`` over the sorted stop strings, one character of the delta at a time.

        ``depth``: the length of the longest suffix of ``tail[:end]`` that is a
        prefix of some stop string (``tail[:held]`` is one whole, so ``held``
        starts it). A character lengthens it by at most one, so trying lengths
        down from ``depth + 1`` costs few binary searches per character (the
        Aho-Corasick state, without building the automaton: a request with many
        stops costs one sort, when it is submitted: ``StopIndex``). A stop string ending at
        ``end`` is a suffix of that text, which only moves right: once it starts
        at or after a found stop string, no earlier one can follow.
        """
        ix = self._ix
        if not held and ix.chars.isdisjoint(tail):
            return -1, 0
        stops, whole, lengths = ix.sorted, ix.whole, ix.lengths
        count = len(stops)
        longest = ix.longest
        depth = held
        cut = -1
        for end in range(held + 1, len(tail) + 1):
            k = min(depth + 1, longest)
            while k:
                piece = tail[end - k : end]
                at = bisect.bisect_left(stops, piece)
                if at < count and stops[at].startswith(piece):
                    break
                k -= 1
            depth = k
            if cut >= 0 and end - depth >= cut:
                break
            # The longest stop string ending here starts earliest.
            for k in range(depth, 0, -1):
                if k in lengths and tail[end - k : end] in whole:
                    if cut < 0 or end - k < cut:
                        cut = end - k
                    break
        return (cut, 0) if cut >= 0 else (-1, depth)


@attrs.frozen
class Output:
    """The final fields of a request's ``Response`` that its output processor owns."""

    text: str = ""
    raw_text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    parse_errors: tuple[str, ...] = ()


class OutputProcessor:
    """Detokenizer, stop matcher and tool-call parser of one request (one thread at a time).

    ``append(token, out)`` and ``close(out)`` add the chunks they produce to
    ``out`` when it is a list (someone streams) and build none when it is None.
    Its one caller, ``RequestState``, appends only while the request runs, ends it as
    soon as ``append`` returns True (a stop string), and closes it once.
    """

    __slots__ = (
        "_calls",
        "_content",
        "_detok",
        "_errors",
        "_id",
        "_parser",
        "_raw",
        "_reasoning",
        "_stops",
    )

    def __init__(
        self,
        request_id: str,
        decode: Callable[[list[int]], str],
        stops: tuple[str, ...] | StopIndex | None = (),
        parser: StreamParser | None = None,
    ):
        """``stops``: the request's stop strings, or their ``StopIndex`` (None: none)."""
        self._id = request_id
        self._detok = Detokenizer(decode)
        if stops is not None and not isinstance(stops, StopIndex):
            stops = StopIndex.of(stops)
        self._stops = StopMatcher(stops) if stops is not None else None
        self._parser = parser
        self._raw: list[str] = []
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._errors: list[str] = []

    @property
    def stopped(self) -> bool:
        """True once a stop string completed (the output ends there)."""
        return self._stops is not None and self._stops.hit

    def append(self, token: int, out: list[Chunk] | None) -> bool:
        """Process one generated token; True when it completed a stop string."""
        delta = self._detok.push(token)
        if not delta:
            return False
        stops = self._stops
        if stops is None:
            self._release(delta, out)
            return False
        self._release(stops.feed(delta), out)
        return stops.hit

    def close(self, out: list[Chunk] | None) -> Output:
        """End of output: release what was held back, close the parser, return the fields."""
        if not self.stopped:
            rest = self._detok.flush()
            if self._stops is not None:
                rest = self._stops.feed(rest) + self._stops.flush()
            self._release(rest, out)
        parser = self._parser
        if parser is not None:
            self._events(self._safely(parser.close, out) or [], out)
            parsed = self._safely(parser.finish, None) if self._parser is not None else None
            if parsed is not None:
                self._errors.extend(parsed.errors)
        return Output(
            text="".join(self._content),
            raw_text="".join(self._raw),
            reasoning="".join(self._reasoning),
            tool_calls=tuple(self._calls),
            parse_errors=tuple(self._errors),
        )

    def _release(self, text: str, out: list[Chunk] | None) -> None:
        if not text:
            return
        self._raw.append(text)
        parser = self._parser
        if parser is None:
            self._events([ContentDelta(text)], out)
        else:
            self._events(self._safely(parser.feed, out, text) or [], out)

    def _safely(self, call: Callable[..., _T], out: list[Chunk] | None, *args: str) -> _T | None:
        """``call(*args)``, or None after turning the parser off if it raised; its
        salvage (what it held back, as content) then goes to ``out`` first."""
        parser = self._parser
        assert parser is not None  # callers only call it while there is a parser
        try:
            return call(*args)
        except BaseException as exc:  # parsers must not raise; if one does, keep the raw text
            if not_ours(exc):
                raise
            _log.exception("tool-call parser failed; the rest of request %s stays text", self._id)
            self._errors.append(
                f"tool-call parsing failed ({type(exc).__name__}: {exc}); the rest of the output "
                "is kept as text"
            )
            self._parser = None
            self._events(parser.salvage(), out)
            return None

    def _events(self, events: list[StreamEvent], out: list[Chunk] | None) -> None:
        for event in events:
            match event:
                case ContentDelta(text=text):
                    self._content.append(text)
                    if out is not None:
                        out.append(Chunk(id=self._id, text=text))
                case ReasoningDelta(text=text):
                    self._reasoning.append(text)
                    if out is not None:
                        out.append(Chunk(id=self._id, reasoning=text))
                case ToolCallCompleted(call=call):
                    self._calls.append(call)
                    if out is not None:
                        out.append(Chunk(id=self._id, tool_call=call))


@attrs.frozen
class OutputSetup:
    """What the output processors of one engine share (immutable, any thread).

    ``decode`` turns ids into text (``TokenizerGuard.decode``); ``tool_format``
    gives each request its tool-call parser; ``on_finish(submit_t, end_t,
    response)`` sees every response once (the engine's metrics).
    """

    decode: Callable[[list[int]], str]
    tool_format: ToolCallFormat
    on_finish: Callable[[float, float, Response], None] | None = None

    def stop_index(self, request: Request) -> StopIndex | None:
        """``request``'s stop strings, indexed: built at submission, off the worker."""
        return StopIndex.of(request.stop)

    def processor(
        self, request: Request, prompt_text: str | None, stops: StopIndex | None = None
    ) -> OutputProcessor:
        """``stops``: the request's ``stop_index`` built beforehand (None: built here)."""
        return OutputProcessor(
            request.id,
            self.decode,
            request.stop if stops is None else stops,
            self.tool_format.parser(request, prompt_text),
        )


def not_ours(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's Ctrl+C (on the main thread), which must propagate.

    Anything else that output processing raises is a bug of a parser or a user's
    format, ``SystemExit`` included: it must fail one request, never stop the worker.
    """
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is (
        threading.main_thread()
    )
