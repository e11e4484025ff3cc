# SPDX-License-Identifier: Apache-2.0
"""``WeightsChange``: what a worker call or a job step changed of the weights that serve.

Concept
    The prefix cache keeps keys and values per *owner*: the base model, one
    adapter, or a combination of adapters (``_loop``). A worker call (adapter
    load, unload, combine, a training job's setup) or a job step (a training
    step) may change some of those weights; the blocks computed with the old
    weights must then go, and only those. The code that changes the model says
    what it changed with a ``WeightsChange`` (through the worker's
    ``note_change``); the worker hands the sum of what one call or step said
    to the loop (``DecodeLoop.weights_changed``).

What each field means
    ``base``: the base model's weights, or the forward its rows run, changed:
    every block goes (the adapters' blocks sit on top of the base's).
    ``every_adapter``: some adapter's weights changed, which is not said: every
    adapter's and combination's blocks go, the base model's stay.
    ``adapters``: these PEFT adapter names were added, removed or retrained: their
    blocks go, and those of every combination that contains one of them.

Invariants: a call that says nothing is taken as :data:`EVERYTHING` (never reuse a
block a change may have made stale); a job step that says nothing as
:data:`EVERY_ADAPTER` (training changes adapter weights only). Torch-free.
"""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class WeightsChange:
    """What changed of the serving weights (see the module docstring); ``|`` adds two."""

    base: bool = False
    every_adapter: bool = False
    adapters: frozenset[str] = frozenset()

    def __or__(self, other: WeightsChange) -> WeightsChange:
        return WeightsChange(
            base=self.base or other.base,
            every_adapter=self.every_adapter or other.every_adapter,
            adapters=self.adapters | other.adapters,
        )

    @classmethod
    def of_adapters(cls, *names: str) -> WeightsChange:
        """Adapters ``names`` added, removed or retrained; nothing else."""
        return cls(adapters=frozenset(names))

    def touches(self, names: frozenset[str]) -> bool:
        """Whether KV computed with the adapters ``names`` (empty: the base model) is stale."""
        if self.base:
            return True
        if not names:
            return False
        return self.every_adapter or not self.adapters.isdisjoint(names)


#: Nothing changed (a call that only reads, or changed nothing this time).
NOTHING = WeightsChange()
#: Anything may have changed: what a call that says nothing stands for.
EVERYTHING = WeightsChange(base=True)
#: Some adapter's weights changed: what a job step that says nothing stands for.
EVERY_ADAPTER = WeightsChange(every_adapter=True)


@attrs.frozen
class CacheOwner:
    """A prefix-cache owner key: the weights a row's keys and values were computed with.

    ``adapter``: the PEFT adapter name the row runs with (``"__base__"``, one adapter, or a
    combination's name); ``names``: the adapters whose weights it uses (the combination's
    name and its members; empty on the base model); ``version``: the versions of those
    weights when the row was admitted (a change to them makes a new key).
    """

    adapter: str
    names: frozenset[str]
    version: tuple[int | tuple[str, int], ...]
