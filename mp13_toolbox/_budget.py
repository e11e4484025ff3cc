# SPDX-License-Identifier: MIT
"""Per-turn tool budgets: how many calls and rounds one user turn may use.

``ToolBudget`` is the frozen configuration; ``BudgetTracker`` is the mutable
tracker for ONE turn, made with ``ToolBudget.start()``. A turn runner uses it
like this::

    budget = ToolBudget(max_calls=8, max_rounds=3).start()    # once per user turn
    while reply.tool_calls:
        if not budget.start_round():        # False: round limit reached
            break                           # (calls would get error results anyway)
        results = await asyncio.gather(
            *(tb.aexecute(c, view, approval=ask, budget=budget) for c in reply.tool_calls))
        ...

Rules, checked by ``Toolbox.execute`` before a call runs:

- ``max_calls``: calls beyond it get an error result (every call that reaches
  the toolbox counts, including refused ones, so a model looping on bad calls
  stops too).
- ``max_rounds``: calls made after ``start_round()`` returned ``False`` get an
  error result. A call made before any ``start_round()`` opens round 1.
- The same call (same name, same arguments) repeated within the turn more
  than ``max_repeats`` times gets an error result that quotes the earlier
  result, so the model can use it instead of calling again (default 0: no
  repeat; ``None``: repeats are not limited).

``BudgetTracker`` guards itself with a lock: parallel calls from threads or
``asyncio.gather`` may share it.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from mp13_toolbox._errors import ToolSettingError, ToolSettingKeywordError
from mp13_toolbox._json_values import canonical_json
from mp13_toolbox._keywords import strict_keywords
from mp13_toolbox._text import plural
from mp13_toolbox._types import ToolCall
from mp13_toolbox._validate import check_limit


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: int | None) -> None:
    message = f"{attr.name} must be a whole number >= 0 or None (no limit)"
    check_limit(value, "integer", ToolSettingError, message, zero=True)


@strict_keywords(ToolSettingKeywordError)
@attrs.frozen
class ToolBudget:
    """Limits for one user turn. ``None`` means no limit."""

    max_calls: int | None = attrs.field(default=None, validator=_non_negative)
    max_rounds: int | None = attrs.field(default=None, validator=_non_negative)
    #: Repeats of one call (same name and arguments) allowed per turn; 0: none.
    max_repeats: int | None = attrs.field(default=0, validator=_non_negative)

    def start(self) -> BudgetTracker:
        """A fresh tracker for one turn."""
        return BudgetTracker(self)


def call_key(call: ToolCall) -> str:
    """Identity of a call for repeat detection: name + canonical JSON arguments (so
    ``{"n": 1}`` repeats ``{"n": 1.0}``, as JSON schema counts them equal)."""
    try:
        args = canonical_json(call.arguments)
    except Exception:
        # Arguments too deep to encode, or with a key or value whose str/repr fails
        # (validation rejects them anyway): a key of their own, so counting cannot fail.
        args = f"<too deep: {id(call.arguments)}>"
    return f"{call.name}\x00{args}"


class BudgetTracker:
    """Mutable per-turn counters for a ``ToolBudget`` (see the module doc)."""

    def __init__(self, budget: ToolBudget | None = None) -> None:
        self.budget = budget if budget is not None else ToolBudget()
        self._lock = threading.Lock()
        self._calls = 0
        self._rounds = 0
        self._seen: dict[str, int] = {}
        self._results: dict[str, str] = {}

    @property
    def calls(self) -> int:
        """Calls counted so far in this turn."""
        return self._calls

    @property
    def rounds(self) -> int:
        """Rounds started so far in this turn."""
        return self._rounds

    @property
    def exhausted(self) -> bool:
        """True when no further call could run (call or round limit reached)."""
        b = self.budget
        with self._lock:
            return (b.max_calls is not None and self._calls >= b.max_calls) or (
                b.max_rounds is not None and self._rounds > b.max_rounds
            )

    def start_round(self) -> bool:
        """Open the next round of tool calls; ``False`` when over ``max_rounds``."""
        with self._lock:
            self._rounds += 1
            return self.budget.max_rounds is None or self._rounds <= self.budget.max_rounds

    def admit(self, call: ToolCall) -> str | None:
        """Count ``call``; return why it must not run, or ``None`` if it may."""
        b = self.budget
        key = call_key(call)
        with self._lock:
            if self._rounds == 0:
                self._rounds = 1
            self._calls += 1
            if b.max_rounds is not None and self._rounds > b.max_rounds:
                return (
                    f"Tool round limit reached ({plural(b.max_rounds, 'round')} this turn); "
                    "answer the user with what you have now."
                )
            if b.max_calls is not None and self._calls > b.max_calls:
                return (
                    f"Tool call limit reached ({plural(b.max_calls, 'call')} this turn); "
                    "answer the user with what you have now."
                )
            seen = self._seen.get(key, 0)
            self._seen[key] = seen + 1
            if b.max_repeats is not None and seen > b.max_repeats:
                earlier = self._results.get(key)
                text = (
                    f"You already called {call.name} with these same arguments in this turn; "
                    "do not repeat the call."
                )
                if earlier is not None:
                    text += f" Its result was:\n{earlier}"
                return text
            return None

    def record(self, call: ToolCall, content: str) -> None:
        """Remember a call's result text, quoted if the call is repeated."""
        with self._lock:
            self._results[call_key(call)] = content
