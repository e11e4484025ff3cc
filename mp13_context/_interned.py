# SPDX-License-Identifier: MIT
"""Effective settings interned by content: each distinct value is stored once, under an id.

A node stores the id of its settings (see ``_session``; the schema calls them
states: table ``states``, column ``state_id``), so ``settings_at`` is one
lookup. ``SettingsTable`` caches ``data -> id`` and ``id -> settings`` for one
store. All tables share ``Interning``: the caches, ``intern``, ``get`` and the
fold of commands; they differ only in where a new value is kept.

Invariant: the cache only holds settings that are committed to the store. A
batch written in the caller's transaction (an import) interns through a
``StagedSettings``, whose new values join the cache by ``commit()`` once that
transaction has committed; a rolled-back batch is simply dropped.
``ScratchSettings`` keeps its values in memory only, for the checks that fold
commands again without trusting (or touching) the store.
"""

from __future__ import annotations

import abc
from typing import Any

from mp13_context._convert import dumps, loads
from mp13_context._model import Command
from mp13_context._settings import EffectiveSettings, apply, check_command
from mp13_context._store import Store


class Interning(abc.ABC):
    """``data -> id`` and ``id -> settings`` caches over a backing store of settings."""

    def __init__(self) -> None:
        self._values: dict[int, EffectiveSettings] = {}
        self._ids: dict[str, int] = {}
        self._initial: int | None = None

    @abc.abstractmethod
    def _new_id(self, data: str) -> int:
        """The id the backing store keeps the settings JSON ``data`` under (added if new)."""

    @abc.abstractmethod
    def _load(self, sid: int) -> EffectiveSettings:
        """Settings ``sid`` from the backing store (not in the caches)."""

    @property
    def initial(self) -> int:
        """The id of the empty settings (a root's)."""
        if self._initial is None:
            self._initial = self.intern(EffectiveSettings())
        return self._initial

    def intern(self, settings: EffectiveSettings) -> int:
        data = dumps(settings)
        sid = self._ids.get(data)
        if sid is None:
            sid = self._ids[data] = self._new_id(data)
            self._values[sid] = settings
        return sid

    def get(self, sid: int) -> EffectiveSettings:
        settings = self._values.get(sid)
        if settings is None:
            settings = self._values[sid] = self._load(sid)
        return settings

    def fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        """The settings id after ``commands`` starting at settings ``sid`` (``CommandError``
        for a command that cannot apply there)."""
        for cmd in commands:
            if cmd.kind.changes_settings:
                settings = self.get(sid)
                check_command(settings, cmd)
                sid = self.intern(apply(settings, sid, cmd, self.get))
        return sid


class SettingsTable(Interning):
    """The interned settings of one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self._store = store

    def _new_id(self, data: str) -> int:
        return self._store.intern_state(data)

    def _load(self, sid: int) -> EffectiveSettings:
        return loads(self._store.state(sid), EffectiveSettings)


class StagedSettings(Interning):
    """Settings interned inside the caller's transaction on ``conn``, on top of ``table``;
    ``commit()`` after it commits (see the module docstring)."""

    def __init__(self, table: SettingsTable, conn: Any) -> None:
        super().__init__()
        self._table = table
        self._conn = conn

    def _new_id(self, data: str) -> int:
        return self._table._ids.get(data) or Store.intern_in(self._conn, data)

    def _load(self, sid: int) -> EffectiveSettings:
        return self._table.get(sid)

    def commit(self) -> None:
        """Let the table cache what this transaction interned, now that it is committed."""
        for data, sid in self._ids.items():
            self._table._ids[data] = sid
            self._table._values[sid] = self._values[sid]


class ScratchSettings(Interning):
    """Interning in memory only (ids 1, 2, ...), for folds that must not use the store."""

    def _new_id(self, data: str) -> int:
        return len(self._ids) + 1

    def _load(self, sid: int) -> EffectiveSettings:
        raise KeyError(f"settings {sid} were not interned here")
