# SPDX-License-Identifier: Apache-2.0
"""The rows of the step loop: a request being served, and prompts prefilled together.

``Row`` is one admitted request as the loop sees it: its adapter, its sampling
state, the tokens whose keys and values it has computed (``seq``) and the token
it sampled last. ``PrefillGroup`` is a set of rows whose prompts are computed
together, left-padded into one ``(rows, width)`` id matrix, chunk by chunk on
top of their own ``BatchKV`` (empty, or a prefix-cache hit); when its last
column is computed its rows join the running batch.

Invariants: a group's rows are right-aligned like its ``BatchKV``: row ``i``'s
remaining tokens are the last ``real[i]`` columns of ``ids``, of which the
first ``done`` columns are computed; worker thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mp13_engine._changes import CacheOwner
from mp13_engine._generation import Sampling, left_pad
from mp13_engine._kv import BatchKV
from mp13_engine._streams import RequestState


class Row:
    """One admitted request (worker thread only)."""

    __slots__ = ("adapter", "config", "last", "n", "noted", "owner", "sampling", "seq", "state")

    def __init__(self, state: RequestState, adapter: str, config: Any, owner: CacheOwner):
        self.state = state
        self.adapter = adapter  # the PEFT adapter name the row runs with
        self.config = config  # that adapter's PEFT config object (None on the base)
        self.owner = owner  # its prefix-cache key: the adapter and its weights' versions
        self.sampling = Sampling(state.request, state.max_new_tokens)
        self.seq: list[int] = list(state.prompt_ids or ())  # tokens whose KV is (being) computed
        self.noted = 0  # how many of ``seq`` the repetition penalty has seen
        self.n = 0  # tokens generated
        self.last = -1  # the token sampled last, fed at the next decode step


class PrefillGroup:
    """Rows whose prompts are being computed together, chunk by chunk."""

    __slots__ = ("done", "fused", "ids", "kv", "real", "rows")

    def __init__(
        self,
        rows: list[Row],
        todo: list[list[int]],
        kv: BatchKV,
        pad_id: int,
        fused: bool = True,
    ):
        self.rows = rows
        self.fused = fused  # False after a fault: the retry uses PEFT's own per-row path
        self.ids = left_pad(todo, pad_id)  # (rows, width): the tokens still to compute
        self.real = [len(t) for t in todo]
        self.kv = kv if kv.rows else BatchKV(lens=[0] * len(rows))
        self.done = 0  # columns of ``ids`` already computed

    @property
    def width(self) -> int:
        return int(self.ids.shape[1])

    def cost(self) -> int:
        """Tokens (padding included) still to compute."""
        return len(self.rows) * (self.width - self.done)

    def chunk(self, budget: int) -> tuple[int, int, list[int]]:
        """The next chunk within ``budget`` tokens: (start, end, real tokens per row)."""
        width = self.width
        cols = min(width - self.done, max(1, budget // len(self.rows)))
        end = self.done + cols
        new = [max(0, min(cols, end - (width - r))) for r in self.real]
        return self.done, end, new

    def select(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.real = [self.real[i] for i in keep]
        self.ids = self.ids[list(keep)]
        self.kv.select(keep)
        # Leading columns that only padding of the rows that left used are dropped.
        lead = self.width - max(self.real, default=0)
        if lead > 0:
            self.ids = self.ids[:, lead:]
            self.done = max(0, self.done - lead)

    def split(self) -> list[PrefillGroup]:
        """Each row as its own group (after a fault), keeping what it computed.

        The parts retry without the fused LoRA hooks (PEFT's own path), as a decode
        batch does, so a fault in the fused path fails no row that works alone.
        """
        parts = []
        for i, row in enumerate(self.rows):
            todo = self.ids[i, max(self.done, self.width - self.real[i]) :].tolist()
            parts.append(PrefillGroup([row], [todo], self.kv.take(i), 0, fused=False))
        return parts
