# SPDX-License-Identifier: MIT
"""Effective states interned by content: each distinct state is stored once, under an id.

A node stores the id of its state (see ``_session``), so ``state_at`` is one
lookup. ``StateTable`` caches ``data -> id`` and ``id -> state`` for one store.

Invariant: the cache only holds states that are committed to the store. A
batch written in the caller's transaction (an import) interns through
``staged(conn)``, whose new states join the cache by ``commit()`` once that
transaction has committed; a rolled-back batch is simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mp13_context._convert import dumps, loads
from mp13_context._model import Command
from mp13_context._state import EffectiveState, apply, changes_state, check_command
from mp13_context._store import Store


def fold(
    sid: int,
    commands: tuple[Command, ...],
    intern: Callable[[EffectiveState], int],
    get: Callable[[int], EffectiveState],
) -> int:
    """The state id after ``commands`` starting at state ``sid`` (``CommandError`` for a
    command that cannot apply there)."""
    for cmd in commands:
        if changes_state(cmd):
            state = get(sid)
            check_command(state, cmd)
            sid = intern(apply(state, sid, cmd, get))
    return sid


class StateTable:
    """The interned states of one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._states: dict[int, EffectiveState] = {}
        self._ids: dict[str, int] = {}
        self._initial: int | None = None

    @property
    def initial(self) -> int:
        """The id of the empty state (a root's)."""
        if self._initial is None:
            self._initial = self.intern(EffectiveState())
        return self._initial

    def intern(self, state: EffectiveState) -> int:
        data = dumps(state)
        sid = self._ids.get(data)
        if sid is None:
            sid = self._store.intern_state(data)
            self._ids[data] = sid
            self._states[sid] = state
        return sid

    def get(self, sid: int) -> EffectiveState:
        state = self._states.get(sid)
        if state is None:
            state = loads(self._store.state(sid), EffectiveState)
            self._states[sid] = state
        return state

    def fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        return fold(sid, commands, self.intern, self.get)

    def staged(self, conn: Any) -> StagedStates:
        """Interning inside the caller's transaction on ``conn`` (see the module docstring)."""
        return StagedStates(self, conn)


class StagedStates:
    """States interned inside one transaction; ``commit()`` after it commits."""

    def __init__(self, table: StateTable, conn: Any) -> None:
        self._table = table
        self._conn = conn
        self._ids: dict[str, int] = {}
        self._states: dict[int, EffectiveState] = {}

    def intern(self, state: EffectiveState) -> int:
        data = dumps(state)
        sid = self._table._ids.get(data) or self._ids.get(data)
        if sid is None:
            sid = self._ids[data] = Store.intern_in(self._conn, data)
            self._states[sid] = state
        return sid

    def get(self, sid: int) -> EffectiveState:
        state = self._states.get(sid)
        return state if state is not None else self._table.get(sid)

    def fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        return fold(sid, commands, self.intern, self.get)

    def commit(self) -> None:
        for data, sid in self._ids.items():
            self._table._ids[data] = sid
            self._table._states[sid] = self._states[sid]
