# SPDX-License-Identifier: MIT
"""Replay: re-run a saved conversation on another engine or configuration, and compare.

``replay(source, into=..., engine=..., toolbox=...)`` walks the path of the
source (a cursor's branch, or a conversation's main line) and rebuilds it in a
NEW conversation of ``into``:

- replayable commands (system, adapters, tools scope, parameters) are recorded
  again, in order, where they were on the path; commands recorded after a reply
  but before the next user turn stay there;
- each user turn is asked again; everything the runner made by itself (replies
  after tool rounds, tool results, automatic continuations) is *regenerated*,
  not copied; a continuation the user asked for is asked for again when the new
  reply is truncated too;
- log notes and recorded API calls are not replayed, and no permission comes
  from the source: tools run under ``toolbox`` with its own modes, approval state
  and the ``approval`` callback given here. Replayed tools commands are scope
  layers, and layers can only narrow the toolbox's global modes (the toolbox is
  a ceiling, see ``mp13_toolbox``), so a foreign session cannot widen what tools
  may do.

The ``ReplayReport`` has one ``ReplayTurn`` per user turn: the final reply text
of both runs, whether they are equal and how similar (``difflib`` ratio), the
tool calls of both (compared by name and arguments; ids differ by design) and
the metrics side by side.

``progress=`` (a function, sync or async, like ``on_event``) follows a long
replay: it gets a ``ReplayProgress`` as each user turn starts (``turn`` None)
and as it ends (``turn`` its ``ReplayTurn``), with ``index`` and ``total``
user turns and a ``message`` such as ``"turn 3 of 12: ..."``, the way
``models.fetch(progress=...)`` reports a download.
"""

from __future__ import annotations

import collections
import difflib
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from mp13_context._context import ChatContext
from mp13_context._cursor import Cursor
from mp13_context._errors import ContextError, CursorError
from mp13_context._events import EventCallback, check_callback
from mp13_context._messages import whole_turn
from mp13_context._model import Command, ConversationInfo, Node, Role, Turn
from mp13_context._protocol import EngineClient
from mp13_context._session import Session
from mp13_context._sync import run_sync
from mp13_engine import RequestMetrics
from mp13_toolbox import Approver, Toolbox, ToolCall


@attrs.frozen(kw_only=True)
class ReplayTurn:
    """The comparison for one user turn."""

    index: int
    user_text: str
    original_text: str
    replayed_text: str
    similarity: float
    original_tool_calls: tuple[ToolCall, ...] = ()
    replayed_tool_calls: tuple[ToolCall, ...] = ()
    original_metrics: RequestMetrics | None = None
    replayed_metrics: RequestMetrics | None = None
    original_node_id: str | None = None
    replayed_node_id: str | None = None
    error: str | None = None

    @property
    def text_equal(self) -> bool:
        """The final reply text was reproduced exactly."""
        return self.original_text == self.replayed_text

    @property
    def tool_calls_equal(self) -> bool:
        """The same tool calls by name and arguments, in order (ids are not compared)."""
        return _call_keys(self.original_tool_calls) == _call_keys(self.replayed_tool_calls)


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What ``replay`` did: where the new conversation is and the per-turn comparison."""

    source_conversation_id: str
    conversation_id: str
    leaf_node_id: str
    turns: tuple[ReplayTurn, ...] = ()

    @property
    def all_equal(self) -> bool:
        """Every reply text and every tool call reproduced exactly (True with no turns)."""
        return all(t.text_equal and t.tool_calls_equal for t in self.turns)

    @property
    def equal_count(self) -> int:
        """Turns whose reply text was reproduced exactly (tool calls not compared; see
        ``all_equal``)."""
        return sum(t.text_equal for t in self.turns)

    @property
    def mean_similarity(self) -> float:
        """The mean ``similarity`` of the turns (1.0 when there are none)."""
        return sum(t.similarity for t in self.turns) / len(self.turns) if self.turns else 1.0


@attrs.frozen(kw_only=True)
class ReplayProgress:
    """One progress report of a replay (``replay(..., progress=...)``).

    ``index``: the user turn it is about, counted from 1, of ``total`` user turns on
    the replayed path. ``turn``: None when that turn starts, its ``ReplayTurn`` when it
    is done (``done`` turns are then finished). ``message``: a line a person can read
    (``"turn 3 of 12: <user text>"``, and ``"turn 3 of 12 done: same"``).
    """

    index: int
    total: int
    user_text: str
    turn: ReplayTurn | None = None
    message: str

    def __str__(self) -> str:  # so that ``progress=print`` prints the line
        return self.message

    @property
    def done(self) -> int:
        """User turns replayed so far (``index`` once this one is done, else one less)."""
        return self.index if self.turn is not None else self.index - 1


#: What ``progress=`` takes: a sync or async function of one ``ReplayProgress``.
ReplayProgressCallback = Callable[[ReplayProgress], Awaitable[None] | None]


async def _report(callback: ReplayProgressCallback | None, progress: ReplayProgress) -> None:
    if callback is not None:
        out: Any = callback(progress)
        if inspect.isawaitable(out):
            await out


def _line(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters, for a progress message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _call_keys(calls: tuple[ToolCall, ...]) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in calls]


#: Up to this product of two lengths, ``difflib`` compares them exactly (at most about a
#: second even for a two-letter alphabet); its cost grows with the pairs of equal
#: items, so two 100 kB replies compared character by character would take minutes.
_EXACT = 4_000_000
#: Coarser pieces for longer texts, coarsest first: lines (with their line break), then
#: words (with the white space after them). Each joins back to the text it came from.
_PIECES = (re.compile(r"[^\n]*\n|[^\n]+"), re.compile(r"\S+\s*|\s+"))


def similarity(a: str, b: str) -> float:
    """How alike two texts are, 0..1 (``difflib.SequenceMatcher.ratio``): 1.0 only for
    equal texts.

    Texts of up to about 2,000 characters each are compared character by character.
    Longer ones keep their common start and end as matching and compare the rest line
    by line, then the lines that differ word by word, then character by character, in
    a bounded amount of work: what is left when it runs out counts as different.
    """
    if not a and not b:
        return 1.0
    return 2.0 * _matched(a, b, _PIECES, [4 * _EXACT]) / (len(a) + len(b))


def _matched(a: str, b: str, pieces: tuple[re.Pattern[str], ...], budget: list[int]) -> int:
    """How many characters of ``a`` and ``b`` match; ``budget`` (one mutable number)
    is the work left, in ``difflib`` cost (the product of the compared lengths)."""
    if a == b:
        return len(a)
    if len(a) * len(b) <= min(_EXACT, budget[0]):
        budget[0] -= len(a) * len(b)
        blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        return sum(block.size for block in blocks)
    start = _common_start(a, b)
    end = _common_start(a[start:][::-1], b[start:][::-1])
    a, b = a[start : len(a) - end], b[start : len(b) - end]
    for level in range(len(pieces)):
        pa, pb = pieces[level].findall(a), pieces[level].findall(b)
        cost = _pairs(pa, pb)
        if cost <= min(_EXACT, budget[0]):
            break
    else:
        return start + end
    budget[0] -= cost
    matched = start + end
    ia = ib = 0
    for i, j, n in difflib.SequenceMatcher(None, pa, pb, autojunk=False).get_matching_blocks():
        matched += sum(map(len, pa[i : i + n]))
        if i > ia and j > ib:  # pieces that differ: compare them at a finer level
            gap_a, gap_b = "".join(pa[ia:i]), "".join(pb[ib:j])
            matched += _matched(gap_a, gap_b, pieces[level + 1 :], budget)
        ia, ib = i + n, j + n
    return matched


def _common_start(a: str, b: str) -> int:
    """The length of the longest common start (slices compared in C, halving the range)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _pairs(pa: list[str], pb: list[str]) -> int:
    """``difflib``'s cost for two lists of pieces: the pairs of equal pieces (for lines
    or words, that are mostly different, far fewer than the product of the lengths)."""
    counts = collections.Counter(pb)
    return len(pa) + len(pb) + sum(counts[p] for p in pa)


def _replayable(node: Node) -> list[Command]:
    return [c for c in node.commands if c.kind.changes_settings]


def _is_user(node: Node) -> bool:
    return node.turn is not None and node.turn.role is Role.USER


def _split(path: list[Node]) -> list[tuple[list[Command], Node | None, list[Node]]]:
    """``(commands before, user node, the nodes of its exchange)`` per user turn; a last
    entry with user ``None`` holds the commands after the last exchange."""
    out: list[tuple[list[Command], Node | None, list[Node]]] = []
    pending: list[Command] = []
    i = 0
    while i < len(path):
        node = path[i]
        if not _is_user(node):
            pending += _replayable(node)
            i += 1
            continue
        j = i + 1
        while j < len(path) and not _is_user(path[j]):
            j += 1
        out.append((pending, node, path[i + 1 : j]))
        pending = []
        i = j
    out.append((pending, None, []))
    return out


def _has(session: Session, cid: str) -> bool:
    try:
        session.conversation(cid)
    except ContextError:
        return False
    return True


def _calls(turns: list[Turn]) -> tuple[ToolCall, ...]:
    return tuple(c for t in turns if t.role is Role.ASSISTANT for c in t.tool_calls)


async def areplay(
    source: Cursor | ConversationInfo | str,
    into: Session | None = None,
    engine: EngineClient | None = None,
    toolbox: Toolbox | None = None,
    *,
    session: Session | None = None,
    title: str | None = None,
    approval: Approver | None = None,
    on_event: EventCallback | None = None,
    progress: ReplayProgressCallback | None = None,
) -> ReplayReport:
    """Async ``replay`` (see the module docstring)."""
    check_callback(progress, "replay's progress")
    for name, value in (("into", into), ("session", session)):
        if value is not None and not isinstance(value, Session):
            raise ContextError(
                f"replay's {name}= takes a Session, not {type(value).__name__}; open it "
                "with Session.open(path)"
            )
    if isinstance(source, Cursor):
        if source.running:
            # Its branch ends at a reply still being recorded (or a user turn awaiting one).
            raise CursorError(
                "replay(cur) is refused while this cursor is running an exchange (its last "
                "reply is still being recorded): await it or cancel() it first, or replay up "
                "to where that exchange started: replay(cur.clone(), ...)"
            )
        src, leaf = source.session, source.node_id
        engine = engine if engine is not None else source.scope_state.engine
        toolbox = toolbox if toolbox is not None else source.scope_state.toolbox
    elif isinstance(source, (str, ConversationInfo)):
        cid = source if isinstance(source, str) else source.id
        if session is None and into is not None and _has(into, cid):
            session = into  # replaying within one session
        if session is None:
            if isinstance(source, ConversationInfo):
                # A header is a plain value: it cannot say which session it came from.
                where = "a ConversationInfo does not carry it; pass it, "
            elif into is not None:  # the id may be mistyped as well as from another session
                where = f"{cid!r} is not a conversation of into; check the id, or "
            else:
                where = ""
            raise ContextError(
                f"replay of conversation {cid} needs the session it is in: {where}"
                "replay(conv, session=source_session, into=..., engine=...), "
                "or replay a cursor of it: replay(cur, into=..., engine=...)"
            )
        src = session
        leaf = src.leaf(src.conversation(cid).root_id).id
    else:
        raise ContextError(
            f"replay replays a Cursor, a ConversationInfo or a conversation id, "
            f"not {type(source).__name__}"
        )
    if engine is None:
        raise ContextError("replay needs an engine: replay(source, engine=...)")
    into = into if into is not None else src
    path = src.path(leaf)
    src_info = src.conversation(path[0].conversation_id)
    ctx = ChatContext(into, engine, toolbox, scope="replay", approval=approval, on_event=on_event)
    cur = ctx.cursor(
        title=title if title is not None else f"replay of {src_info.title or src_info.id}"
    )
    rows: list[ReplayTurn] = []
    parts = _split(path)
    total = sum(user is not None for _, user, _ in parts)
    for before, user, segment in parts:
        pre: list[Command] = []
        post: list[Command] = []
        replied = False
        for node in segment:
            if node.turn is not None and node.turn.role is Role.ASSISTANT:
                replied = True
            elif node.turn is None:
                (post if replied else pre).extend(_replayable(node))
        for cmd in before + pre:
            cur.record(cmd)
        if user is None:
            break
        assert user.turn is not None
        index = len(rows) + 1
        await _report(
            progress,
            ReplayProgress(
                index=index,
                total=total,
                user_text=user.turn.text,
                message=f"turn {index} of {total}: {_line(user.turn.text)}",
            ),
        )
        final = await cur.aask(user.turn.text)
        asked = [n for n in segment if n.turn and n.turn.continuation and not n.turn.auto]
        for _ in asked:
            if not final.truncated:
                break
            final = await cur.acontinue()
        original = [n for n in segment if n.turn and n.turn.role is Role.ASSISTANT]
        orig_final = whole_turn(src.path(original[-1].id)) if original else None
        orig_text = orig_final.text if orig_final else ""
        new_turns = cur.exchange()
        row = ReplayTurn(
            index=len(rows),
            user_text=user.turn.text,
            original_text=orig_text,
            replayed_text=final.text,
            similarity=similarity(orig_text, final.text),
            original_tool_calls=_calls([n.turn for n in segment if n.turn]),
            replayed_tool_calls=_calls(new_turns),
            original_metrics=orig_final.metrics if orig_final else None,
            replayed_metrics=final.metrics,
            original_node_id=orig_final.node_id if orig_final else None,
            replayed_node_id=final.node_id,
            error=final.error,
        )
        rows.append(row)
        outcome = "same" if row.text_equal else f"differs (similarity {row.similarity:.2f})"
        if row.error:
            outcome = f"failed: {_line(row.error)}"
        await _report(
            progress,
            ReplayProgress(
                index=index,
                total=total,
                user_text=user.turn.text,
                turn=row,
                message=f"turn {index} of {total} done: {outcome}",
            ),
        )
        for cmd in post:
            cur.record(cmd)
    return ReplayReport(
        source_conversation_id=src_info.id,
        conversation_id=cur.conversation_id,
        leaf_node_id=cur.node_id,
        turns=tuple(rows),
    )


def replay(
    source: Cursor | ConversationInfo | str,
    into: Session | None = None,
    engine: EngineClient | None = None,
    toolbox: Toolbox | None = None,
    **kwargs: Any,
) -> ReplayReport:
    """Re-run ``source`` into a new conversation of ``into`` and compare (module docstring).

    ``source``: a ``Cursor`` (its branch up to the cursor; its context's engine and
    toolbox are the defaults; not while it runs an exchange, ``CursorError``) or a
    conversation (``ConversationInfo`` or id; its main line), found in ``session=`` or
    else in ``into``. ``into`` defaults to the source's session. ``progress``: a function
    given a ``ReplayProgress`` as each user turn starts and ends (``progress=print`` shows
    "turn i of n" lines).
    """
    return run_sync(areplay(source, into, engine, toolbox, **kwargs))
