# SPDX-License-Identifier: MIT
"""Effective settings interned by content: each distinct value is stored once, under an id.

A node stores the id of its settings (see ``_session``; the schema calls them
states: table ``states``, column ``state_id``), so ``settings_at`` is one
lookup. ``SettingsTable`` caches ``data -> id`` and ``id -> settings`` for one
store.

Invariant: the cache only holds settings that are committed to the store. A
batch written in the caller's transaction (an import) interns through
``staged(conn)``, whose new values join the cache by ``commit()`` once that
transaction has committed; a rolled-back batch is simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mp13_context._convert import dumps, loads
from mp13_context._model import Command
from mp13_context._settings import EffectiveSettings, apply, check_command
from mp13_context._store import Store


def fold(
    sid: int,
    commands: tuple[Command, ...],
    intern: Callable[[EffectiveSettings], int],
    get: Callable[[int], EffectiveSettings],
) -> int:
    """The settings id after ``commands`` starting at settings ``sid`` (``CommandError``
    for a command that cannot apply there)."""
    for cmd in commands:
        if cmd.kind.changes_settings:
            settings = get(sid)
            check_command(settings, cmd)
            sid = intern(apply(settings, sid, cmd, get))
    return sid


class SettingsTable:
    """The interned settings of one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._values: dict[int, EffectiveSettings] = {}
        self._ids: dict[str, int] = {}
        self._initial: int | None = None

    @property
    def initial(self) -> int:
        """The id of the empty settings (a root's)."""
        if self._initial is None:
            self._initial = self.intern(EffectiveSettings())
        return self._initial

    def known(self, data: str) -> int | None:
        """The id of settings already committed under their JSON ``data``, if any."""
        return self._ids.get(data)

    def adopt(self, data: str, sid: int, settings: EffectiveSettings) -> None:
        """Cache settings that were committed under ``sid``."""
        self._ids[data] = sid
        self._values[sid] = settings

    def intern(self, settings: EffectiveSettings) -> int:
        data = dumps(settings)
        sid = self._ids.get(data)
        if sid is None:
            sid = self._store.intern_state(data)
            self.adopt(data, sid, settings)
        return sid

    def get(self, sid: int) -> EffectiveSettings:
        settings = self._values.get(sid)
        if settings is None:
            settings = loads(self._store.state(sid), EffectiveSettings)
            self._values[sid] = settings
        return settings

    def fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        return fold(sid, commands, self.intern, self.get)

    def staged(self, conn: Any) -> StagedSettings:
        """Interning inside the caller's transaction on ``conn`` (see the module docstring)."""
        return StagedSettings(self, conn)


class StagedSettings:
    """Settings interned inside one transaction; ``commit()`` after it commits."""

    def __init__(self, table: SettingsTable, conn: Any) -> None:
        self._table = table
        self._conn = conn
        self._ids: dict[str, int] = {}
        self._values: dict[int, EffectiveSettings] = {}

    def intern(self, settings: EffectiveSettings) -> int:
        data = dumps(settings)
        sid = self._table.known(data) or self._ids.get(data)
        if sid is None:
            sid = self._ids[data] = Store.intern_in(self._conn, data)
            self._values[sid] = settings
        return sid

    def get(self, sid: int) -> EffectiveSettings:
        settings = self._values.get(sid)
        return settings if settings is not None else self._table.get(sid)

    def fold(self, sid: int, commands: tuple[Command, ...]) -> int:
        return fold(sid, commands, self.intern, self.get)

    def commit(self) -> None:
        for data, sid in self._ids.items():
            self._table.adopt(data, sid, self._values[sid])
