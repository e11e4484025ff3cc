# SPDX-License-Identifier: MIT
"""``Cursor``: a position in a conversation tree, and everything done from there.

A cursor points at a node. Navigation (``parent``, ``child``, ``leaf``,
``goto``, siblings) moves it; ``ask`` appends a user turn and the reply loop's
turns below it and moves it to the last one; ``fork``/``try_out``/``batch``
make new cursors on new branches and leave this one where it is.

Commands (``cur.system``, ``cur.adapters``, ``cur.tools``, ``cur.params``,
``cur.log``) are recorded in the tree, never on a node another branch can see:
a cursor appends them to a structural node it created itself and that has no
children yet, and otherwise to a new ``PLACEHOLDER`` child that it moves to.
Turn nodes never carry commands, which lets ``retry`` move the commands given
after a reply in front of the new reply. Cursor ``overrides`` are parameters
that apply to this cursor's requests without being recorded.

While an exchange runs, the cursor holds the runner's ``Exchange``: its
position follows the last node the exchange recorded and ``cancel()`` goes to
it. The cursor shares its context's ``ScopeState`` (session, engine, toolbox,
callbacks, registries) with every cursor made from it.

Invariant: a cursor runs one exchange at a time (``CursorError`` otherwise);
a closed try-out refuses everything but reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from mp13_context._errors import CursorError, StoreError
from mp13_context._events import EventCallback, check_callback
from mp13_context._handles import AdapterCommands, ParamCommands, SystemCommands, ToolCommands
from mp13_context._messages import whole_turn
from mp13_context._model import Command, CommandKind, Node, NodeKind, Role, Turn
from mp13_context._request import request_at, run_params
from mp13_context._runner import Exchange
from mp13_context._scope import ScopeState
from mp13_context._settings import EffectiveSettings, check_request_params, validate_params
from mp13_context._stream import EventStream
from mp13_context._sync import run_sync

if TYPE_CHECKING:  # pragma: no cover
    from mp13_context._session import Session
    from mp13_engine import Request


class Cursor:
    """A position in a conversation (see the module docstring).

    Cursors are made by a ``ChatContext`` (``ctx.cursor()``) and by other cursors;
    ``scope_state`` is the runtime state of the context's scope they share.
    """

    def __init__(
        self,
        scope_state: ScopeState,
        node_id: str,
        *,
        overrides: dict[str, Any] | None = None,
        command_node: str | None = None,
    ) -> None:
        self.scope_state = scope_state
        self.overrides: dict[str, Any] = validate_params(overrides or {})
        self._node_id = node_id
        # A structural node this cursor made itself: its commands go there while the
        # node has no children (see the module docstring). None: use a placeholder.
        self._command_node = command_node
        self._exchange: Exchange | None = None  # the exchange running on this cursor
        self._busy = False
        # Held while a call checks that the cursor is idle and marks it busy: two threads
        # asking on one cursor at once (each on its own loop, see ``_sync``) both pass the
        # check otherwise, and both replies run.
        self._claim = threading.Lock()
        self._left: asyncio.Task[Turn] | None = None  # a dropped stream's exchange
        self._closed = False
        self.system = SystemCommands(self)
        self.adapters = AdapterCommands(self)
        self.tools = ToolCommands(self)
        self.params = ParamCommands(self)
        scope_state.cursors.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.conversation_id}/{self.node_id}>"

    # --- reading -----------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        """Where the cursor is; while an exchange runs, the last node it recorded."""
        return self._exchange.at if self._exchange is not None else self._node_id

    @property
    def session(self) -> Session:
        """The session this cursor reads and records in."""
        return self.scope_state.session

    @property
    def node(self) -> Node:
        """The ``Node`` at ``node_id``."""
        return self.session.node(self.node_id)

    @property
    def conversation_id(self) -> str:
        """The conversation the cursor is in (``goto`` can change it)."""
        return self.node.conversation_id

    @property
    def settings(self) -> EffectiveSettings:
        """The effective settings here (recorded commands only; see ``overrides``)."""
        return self.session.settings_at(self.node_id)

    @property
    def turn(self) -> Turn | None:
        """The turn here as the model sees it (continuations joined), if this is a turn."""
        return whole_turn(self.path()) if self.node.is_turn else None

    @property
    def closed(self) -> bool:
        """Whether this is a try-out that was promoted or closed (it then only reads)."""
        return self._closed

    @property
    def running(self) -> bool:
        """Whether an exchange is running on this cursor."""
        return self._busy

    def path(self) -> list[Node]:
        """The nodes from the conversation's root down to here."""
        return self.session.path(self.node_id)

    def children(self) -> list[Node]:
        """The children of this node in creation order, archived ones included."""
        return self.session.children(self.node_id)

    def siblings(self) -> list[Node]:
        """All children of the parent, this node included, in creation order."""
        node = self.node
        return [node] if node.parent_id is None else self.session.children(node.parent_id)

    def messages(self) -> list[dict[str, Any]]:
        """Exactly the messages the next request from here sends."""
        return self.session.messages(self.node_id)

    def request(self, message: str | None = None, **overrides: Any) -> Request:
        """The engine ``Request`` the next reply from here would send; with ``message``,
        the reply to that user message (what ``ask(message)`` sends). Records nothing."""
        params = {**self.overrides, **self._checked(overrides, recording=False)}
        ask = None if message is None else _prompt(message)
        return request_at(self.session, self.scope_state.toolbox, self.node_id, params, ask=ask)

    def prompt(self, message: str | None = None, **overrides: Any) -> str:
        """The exact prompt text the engine would feed the model for the next reply (to
        ``message``, when given)."""
        request = self.request(message, **overrides)
        return self.scope_state.require_engine().format_prompt(request)

    def count_tokens(self, message: str | None = None) -> int:
        """Tokens the engine feeds for the next reply from here (to ``message``, when
        given): its ``count_tokens`` of ``request()``; message text that spells control
        tokens counts as text."""
        return self.scope_state.require_engine().count_tokens(self.request(message))

    def exchange(self) -> list[Turn]:
        """The turns from the last user turn down to here (each with its ``node_id``)."""
        out: list[Turn] = []
        for node in reversed(self.path()):
            if node.turn is None:
                continue
            out.append(attrs.evolve(node.turn, node_id=node.id))
            if node.turn.role is Role.USER:
                break
        out.reverse()
        return out

    # --- moving ------------------------------------------------------------------------

    def _remember(self) -> None:
        """Save where this cursor is as its scope's place in the conversation."""
        node = self.node
        self.session.save_position(self.scope_state.name, node.conversation_id, node.id)

    def _move(self, node_id: str, *, command_node: str | None = None) -> None:
        self._node_id = node_id
        self._command_node = command_node

    def _navigate(self, node_id: str, call: str) -> Cursor:
        self._check_idle(call)
        self._move(node_id)
        self._remember()
        return self

    def goto(self, node_id: str) -> Cursor:
        """Move to any node of this session (another conversation too); returns self."""
        self.session.node(node_id)
        return self._navigate(node_id, "goto()")

    def parent(self) -> Cursor:
        """Move to the parent node; returns self (``CursorError`` at the root)."""
        node = self.node
        if node.parent_id is None:
            raise CursorError("already at the root of the conversation; there is no parent")
        return self._navigate(node.parent_id, "parent()")

    def child(self, index: int = -1) -> Cursor:
        """Move to child ``index`` of ``children()`` (default -1: the newest; archived
        ones count too); returns self. ``CursorError`` if there is no such child."""
        index = _whole(index, "a child index")
        kids = self.children()
        if not kids:
            raise CursorError("this node has no children; ask something to create one")
        try:
            return self._navigate(kids[index].id, "child()")
        except IndexError:
            raise CursorError(f"child {index} does not exist: this node has {len(kids)}") from None

    def sibling(self, offset: int) -> Cursor:
        """Move ``offset`` places among the siblings (``+1`` next, ``-1`` previous; no
        wrapping around); returns self. ``CursorError`` past either end."""
        sibs = self.siblings()
        i = [s.id for s in sibs].index(self.node_id) + _whole(offset, "a sibling offset")
        if not 0 <= i < len(sibs):
            raise CursorError(f"no sibling at offset {offset}: {len(sibs)} siblings here")
        return self._navigate(sibs[i].id, "sibling()")

    def next_sibling(self) -> Cursor:
        """``sibling(+1)``: move to the next sibling (``CursorError`` past the last)."""
        return self.sibling(+1)

    def prev_sibling(self) -> Cursor:
        """``sibling(-1)``: move to the previous sibling (``CursorError`` before the first)."""
        return self.sibling(-1)

    def leaf(self) -> Cursor:
        """Move down the main line to its leaf."""
        return self._navigate(self.session.leaf(self.node_id).id, "leaf()")

    def root(self) -> Cursor:
        """Move to the conversation's root node; returns self."""
        return self._navigate(self.path()[0].id, "root()")

    # --- commands ----------------------------------------------------------------------

    def record(self, cmd: Command) -> None:
        """Record ``cmd`` here, where the handles (``cur.system.set(...)`` ...) record theirs:
        on a structural node this cursor made and that has no children yet, otherwise on
        a new placeholder child that the cursor moves to. ``CommandError`` if it cannot
        apply here (a pop with nothing to pop, a bad parameter value)."""
        if not isinstance(cmd, Command):
            raise CursorError(f"record takes a Command, not {type(cmd).__name__}")
        self._check_idle("recording a command")
        session = self.session
        here = self.node_id
        if self._command_node == here and not session.has_children(here):
            session.add_commands(here, [cmd])
        else:
            node = session.append(here, NodeKind.PLACEHOLDER, commands=[cmd])
            self._move(node.id, command_node=node.id)
        self._remember()

    def log(self, text: str) -> None:
        """Record a note (for people; never sent to a model, never replayed)."""
        self.record(Command(kind=CommandKind.LOG, text=text))

    def record_call(self, call: str, /, **data: Any) -> None:
        """Record that an API call was made here (e.g. ``engine.adapters.load``); not replayed."""
        self.record(Command(kind=CommandKind.API_CALL, text=call, data=data))

    def with_params(self, **overrides: Any) -> Cursor:
        """A new cursor here whose requests use these parameters (not recorded).

        Of a running cursor: a cursor where this one was when its exchange began, since
        its node moves as the reply is recorded (at the user turn awaiting its reply,
        asking again would put two user turns in a row)."""
        self._command_node = None  # two cursors on one node: neither may add commands to it
        overrides = {**self.overrides, **overrides}
        here = self._node_id if self._busy else self.node_id
        return Cursor(self.scope_state, here, overrides=overrides)

    # --- branching ---------------------------------------------------------------------

    def clone(self) -> Cursor:
        """A new cursor at the same node (appending from either makes siblings); of a
        running cursor, where it was when its exchange began (see ``with_params``)."""
        return self.with_params()

    def fork(self, label: str = "") -> Cursor:
        """A new cursor on a new branch (a fork hub below this node); this cursor stays.

        Not while this cursor runs an exchange (``CursorError``): its node changes as the
        reply is recorded. To branch off meanwhile, fork ``clone()``: a cursor where this
        one was when the exchange began."""
        self._check_idle("fork()")
        hub = self.session.append(self.node_id, NodeKind.FORK_HUB, label=label)
        return Cursor(self.scope_state, hub.id, overrides=self.overrides, command_node=hub.id)

    def try_out(self, label: str = "try-out") -> TryOut:
        """Open a try-out branch: ``promote()`` it to the main line (this cursor follows)
        or ``close()`` it (archived). Try-outs belong to this context's scope."""
        self._check_idle("try_out()")
        hub = self.session.append(self.node_id, NodeKind.FORK_HUB, label=label)
        return TryOut(self.scope_state, hub.id, origin=self, overrides=self.overrides)

    async def abatch(
        self, prompts: Sequence[str], *, on_event: EventCallback | None = None, **overrides: Any
    ) -> list[Cursor]:
        """One new branch per prompt under a batch hub, generated together; returns a
        cursor at each reply. This cursor stays.

        The members run concurrently: each sends its request as soon as its user turn
        is recorded, without waiting for the others, so the engine has them all at
        once and batches them. Each member can be cancelled on its own (``cancel()`` on
        its cursor, which ``ChatContext.cursors()`` lists while it runs, or
        ``ChatContext.cancel`` with the id of its ``REQUEST`` event); the others go on.
        """
        await self._after_dropped_stream()
        self._check_idle("batch()")
        if isinstance(prompts, str) or not isinstance(prompts, Iterable):
            raise CursorError(
                f"batch takes a list of prompts, not one {type(prompts).__name__}: batch([text])"
            )
        checked = []
        for i, p in enumerate(prompts):
            if not isinstance(p, str):  # named by place: _prompt's advice is batch itself
                raise CursorError(f"prompts[{i}]: a prompt is a string, not {type(p).__name__}")
            checked.append(p)
        prompts = checked
        check_callback(on_event, "on_event")
        self.scope_state.require_engine()
        params = self._checked(overrides)
        hub = self.session.append(
            self.node_id, NodeKind.BATCH_HUB, label=f"batch of {len(prompts)}"
        )
        kids = [Cursor(self.scope_state, hub.id, overrides=self.overrides) for _ in prompts]
        runs = (
            k._reply(hub.id, on_event, params, ask=p) for k, p in zip(kids, prompts, strict=True)
        )
        # Every member ends before this returns or raises: none goes on unwatched.
        for outcome in await asyncio.gather(*runs, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        return kids

    def batch(self, prompts: Sequence[str], **kwargs: Any) -> list[Cursor]:
        """Sync ``abatch`` (works with or without a running event loop)."""
        return run_sync(self.abatch(prompts, **kwargs))

    def trim(self, n: int = 1) -> Cursor:
        """Drop the last ``n`` user turns (and what followed) from this branch, keeping
        the commands among them that change settings; the dropped part is archived.
        The cursor moves to where the branch now ends; returns self. ``n=0`` changes
        nothing; ``CursorError`` for a negative ``n`` or more turns than the branch has."""
        self._check_idle("trim()")
        n = _whole(n, "the number of user turns to trim")
        if n < 0:
            raise CursorError(f"cannot trim {n} user turns: give a count >= 0 (1 = the last)")
        if n == 0:
            return self
        path = self.path()
        users = [i for i, node in enumerate(path) if node.turn and node.turn.role is Role.USER]
        if len(users) < n:
            raise CursorError(f"cannot trim {n} user turns: this branch has {len(users)}")
        cut = users[-n]
        commands = [c for node in path[cut:] for c in node.commands if c.kind.changes_settings]
        self.session.set_archived(path[cut].id)
        self._move(path[cut - 1].id)
        if commands:
            node = self.session.append(self.node_id, NodeKind.PLACEHOLDER, commands=commands)
            self._move(node.id, command_node=node.id)
        self._remember()
        return self

    # --- running -----------------------------------------------------------------------

    def _checked(self, overrides: dict[str, Any], *, recording: bool = True) -> dict[str, Any]:
        """``overrides`` validated, and refused (``CommandError``) unless they go with this
        cursor's overrides and the parameters set here: checked before anything is
        recorded, so a refused ask leaves no user turn without a reply. ``recording``: the
        reply will be recorded, so a closed or read-only session is refused first, with
        the error that says so (reading the settings here would only say it is closed)."""
        if recording:
            self.scope_state.require_writable()
        params = validate_params(overrides)
        here = self.session.settings_at(self.node_id)
        check_request_params(run_params(here, {**self.overrides, **params}))
        return params

    def _check_idle(self, call: str) -> None:
        """Refuse ``call`` (named in the error) on a closed try-out or a running cursor."""
        if self._closed:
            raise CursorError("this try-out is closed; use the cursor it was opened from")
        if self._busy:
            left = self._left
            if left is not None and not left.done():
                # A sync call cannot wait here: the reply is recorded on its own loop, which
                # a sync call on that loop's thread blocks (see ``astream``).
                raise CursorError(
                    "this cursor's reply from a dropped astream() is still being cancelled "
                    "on its event loop; await the async call instead (aask, aretry, "
                    "acontinue and abatch wait for that reply to be recorded), or close the "
                    "stream first (await events.aclose(), or contextlib.aclosing)"
                )
            # Name a way that works now: every cursor call that moves or branches is
            # refused here, fork() too, but another cursor at the node this one started
            # from is free (its branches become siblings of the running reply's).
            raise CursorError(
                f"{call} is refused while this cursor is running an exchange: await it or "
                f"cancel() it first; to work beside it meanwhile, fork() or ask from another "
                f"cursor where this one started: clone() it, or ctx.cursor(at={self._node_id!r})"
            )

    async def _reply(
        self,
        at: str,
        on_event: EventCallback | None,
        overrides: dict[str, Any],
        *,
        ask: str | None = None,
        continue_first: bool = False,
        call: str = "ask()",
    ) -> Turn:
        """Run an exchange from node ``at`` (after recording the user turn ``ask``);
        ``call`` names the public call for the error if the cursor is busy."""
        self._check_idle(call)
        check_callback(on_event, "on_event")
        exchange = Exchange(self.scope_state, at, {**self.overrides, **overrides}, on_event)
        with self._claim:
            self._check_idle(call)  # again: another thread may have claimed it meanwhile
            self._busy = True
            self._exchange = exchange
        try:
            if ask is not None:
                await exchange.ask(ask)
            turn = await exchange.run(continue_first=continue_first)
        except BaseException:
            # Saving the position must not hide what went wrong (it may be the same full disk).
            with contextlib.suppress(StoreError):
                self._settle(exchange)
            raise
        self._settle(exchange)
        return turn

    def _settle(self, exchange: Exchange) -> None:
        """After an exchange: stay at the last node it recorded, and remember it."""
        self._exchange = None
        self._busy = False
        self._move(exchange.at)
        self._remember()

    async def aask(
        self, text: str, *, on_event: EventCallback | None = None, **overrides: Any
    ) -> Turn:
        """Append a user turn and run the reply loop (tool rounds included); the cursor
        moves to the last recorded turn. Returns the final assistant turn."""
        await self._after_dropped_stream()
        return await self._reply(
            self.node_id, on_event, self._checked(overrides), ask=_prompt(text)
        )

    def ask(self, text: str, **kwargs: Any) -> Turn:
        """Sync ``aask`` (works with or without a running event loop; see ``_sync``)."""
        return run_sync(self.aask(text, **kwargs))

    def astream(self, text: str, **overrides: Any) -> EventStream:
        """``aask`` as an async iterator of ``Event``s; leaving it early cancels the reply
        (recorded as cancelled).

        ``async for event in cur.astream("Hi"): ... break`` stops the reply as soon as
        the stream is dropped (at once in CPython, where the loop drops it on ``break``;
        see ``_stream``): ``running`` stays True until the loop records the cancelled
        reply, and the next ``aask``/``aretry``/``acontinue``/``abatch`` here waits for
        that instead of raising ``CursorError``. A sync call (``ask``, ``record``, moving)
        cannot wait for it, since it blocks the loop that records it: until the reply is
        recorded it raises ``CursorError`` saying so, and leaves the wait to the next
        async call. A stream you keep a name for runs on
        until you close it; ``contextlib.aclosing`` closes it and waits::

            async with contextlib.aclosing(cur.astream("Hi")) as events:
                async for event in events:
                    if done_with(event):
                        break  # the reply is cancelled when the block exits
        """
        return EventStream(
            lambda on_event: self.aask(text, on_event=on_event, **overrides), self._dropped
        )

    def _dropped(self, task: asyncio.Task[Turn]) -> None:
        self._left = task

    async def _after_dropped_stream(self) -> None:
        """Wait for the reply of a dropped stream (being cancelled) to be recorded. Only
        on its own loop: a sync call blocks that loop, so it could never finish. The task
        is forgotten only once it is done, so a call that could not wait for it (a sync
        one) leaves it for the next async call to wait for."""
        task = self._left
        if task is None:
            return
        if not task.done() and task.get_loop() is asyncio.get_running_loop():
            await asyncio.gather(task, return_exceptions=True)
        if task.done() and self._left is task:
            self._left = None

    async def aretry(self, *, on_event: EventCallback | None = None, **overrides: Any) -> Turn:
        """A new reply to the last user turn on this branch, beside the old one.
        Commands recorded after the old reply apply to the new one: they are copied
        onto a new ``PLACEHOLDER`` child of the user turn, and the reply goes under it.
        So the new reply is a sibling of the old one only when no command came between;
        otherwise the placeholder is, and ``siblings()``/``next_sibling()`` from the new
        reply do not reach the old one (``parent().prev_sibling()`` does)."""
        await self._after_dropped_stream()
        self._check_idle("retry()")
        params = self._checked(overrides)
        path = self.path()
        users = [i for i, node in enumerate(path) if node.turn and node.turn.role is Role.USER]
        if not users:
            raise CursorError("nothing to retry: there is no user turn on this branch")
        at = path[users[-1]].id
        commands = [c for node in path[users[-1] + 1 :] if not node.is_turn for c in node.commands]
        if commands:
            at = self.session.append(at, NodeKind.PLACEHOLDER, commands=commands).id
        return await self._reply(at, on_event, params, call="retry()")

    def retry(self, **kwargs: Any) -> Turn:
        """Sync ``aretry`` (works with or without a running event loop)."""
        return run_sync(self.aretry(**kwargs))

    async def acontinue(self, *, on_event: EventCallback | None = None, **overrides: Any) -> Turn:
        """Continue the last assistant reply on this branch (``continue_final``); the
        continuation is joined to the same assistant message."""
        await self._after_dropped_stream()
        self._check_idle("continue_()")
        for node in reversed(self.path()):
            if node.turn is not None:
                if node.turn.role is not Role.ASSISTANT:
                    break
                return await self._reply(
                    self.node_id,
                    on_event,
                    self._checked(overrides),
                    continue_first=True,
                    call="continue_()",
                )
        raise CursorError("nothing to continue: the last turn here is not an assistant reply")

    def continue_(self, **kwargs: Any) -> Turn:
        """Sync ``acontinue`` (``continue`` is a Python keyword)."""
        return run_sync(self.acontinue(**kwargs))

    def cancel(self) -> bool:
        """Cancel the running request of this cursor; True if there was one.

        A request still on its way to the engine is never sent; one in the engine is
        cancelled there. Between requests (while tools run) there is none: cancel the
        task to stop a tool round.
        """
        exchange = self._exchange
        return exchange is not None and exchange.cancel()


class TryOut(Cursor):
    """A try-out branch: ``promote()`` or ``close()`` it (see ``Cursor.try_out``)."""

    def __init__(self, scope_state: ScopeState, hub_id: str, *, origin: Cursor, **kw: Any) -> None:
        super().__init__(scope_state, hub_id, command_node=hub_id, **kw)
        self.origin = origin
        self.hub_id = hub_id
        scope_state.tryouts[hub_id] = self

    def promote(self) -> Cursor:
        """Make this branch the main line; the origin cursor moves here. Returns it.

        Not while the origin runs an exchange (``CursorError``): its reply, when recorded,
        would move it back to its own branch, undoing the move here."""
        self._check_idle("promote()")
        if self.origin.running:
            raise CursorError(
                "promote() is refused while the cursor this try-out was opened from is running "
                "an exchange (recording its reply would move it back off this branch): await "
                "that exchange or cancel() it first, then promote()"
            )
        self.session.set_main_line(self.hub_id)
        self.origin._move(self.node_id)
        self.origin._remember()
        self._finish()
        return self.origin

    def close(self) -> None:
        """Abandon this branch: it is archived (kept, but off the main line), and this
        scope's place in the conversation goes back to the origin cursor, so reopening
        the conversation does not resume inside the discarded branch."""
        if self._closed:
            return
        self._check_idle("close()")
        self.session.set_archived(self.hub_id)
        self._finish()
        if self.origin.conversation_id == self.conversation_id:
            self.origin._remember()

    def _finish(self) -> None:
        self._closed = True
        self.scope_state.tryouts.pop(self.hub_id, None)


def _prompt(text: object) -> str:
    """A user prompt, checked before anything is recorded."""
    if not isinstance(text, str):
        raise CursorError(
            f"a prompt is a string, not {type(text).__name__}; several prompts go to batch([...])"
        )
    return text


def _whole(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CursorError(f"{what} is a whole number, not {type(value).__name__}")
    return value
