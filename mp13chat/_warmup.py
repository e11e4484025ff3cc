# SPDX-License-Identifier: MIT
"""Computing the conversation's fixed start into the prefix cache while the user types.

Why: the first request of a conversation computes its whole prompt, the system prompt
and the builtin tools' descriptions (about 500 tokens, 2-3 s on SmolLM2-135M on a CPU),
before its first token; later requests take that part from the engine's prefix cache.
Right after start (``ChatApp.start``, interactive runs only) ``warm_prefix`` sends the
request the first question would send, with a placeholder question and one new token,
in the background: while the user types, the engine computes that start into its
prefix cache, and the first question computes only its own tokens.

Invariants: it never delays or blocks the user and records nothing. It runs as a
background task of the app (cancelled on close, so ``/quit`` and Ctrl+D are
unaffected); the request is built with ``Cursor.request`` (records nothing) and sent
to the engine directly, not through the cursor, so no turn is recorded; a question typed
while it runs waits for it (``ChatApp.execute``: the question's prompt starts with the
same tokens, so it would compute them anyway) and Ctrl+C still cancels that question.
A failure is kept for ``/warnings`` and the log file (``LibraryLog.note``), never
printed. It is skipped for an engine that is not ``mp13_engine.Engine`` (no prefix
cache to fill), when the engine's prefix cache is off (``prefix_cache_mb`` 0) and when
``ChatConfig.warm_prefix_cache`` is off. The engine counts it as one request
(``/metrics``).

Not only at start: a command that changes what comes before the next question (``/new``,
``/switch``, ``/open``, ``/system ...``, ``/tools ...``, ``/adapters ...``, moving
the cursor, a wrapper app's own command) warms again (``ChatApp.execute`` compares
``prefix_key`` before and after each command; a command that leaves it as it was warms
nothing). A warm-up still running when the prefix changes again is cancelled, and
waited for, before the next one starts; a question always waits for the latest one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import attrs

from mp13_context import Cursor
from mp13_engine import Request
from mp13chat._logs import LibraryLog


@attrs.frozen
class PrefixKey:
    """What the next question's prompt starts with: the prompt text before it, and the
    adapters whose KV the prefix cache keeps it under (the engine's defaults resolved)."""

    prompt: str
    adapters: tuple[str, ...]


#: The placeholder question: only the tokens before it matter (its own are replaced).
PLACEHOLDER = "hi"


def has_prefix_cache(engine: Any) -> bool:
    """Whether ``engine`` is an ``mp13_engine.Engine`` whose prefix cache is on."""
    from mp13_engine import Engine  # the app imports torch only with a real engine

    return isinstance(engine, Engine) and engine.config.prefix_cache_mb > 0


def warm_request(cursor: Cursor) -> Request:
    """The request the first question from ``cursor`` sends, cut to one new token."""
    # Everything that shapes the prompt stays as the first question will send it.
    return attrs.evolve(cursor.request(PLACEHOLDER), max_new_tokens=1, parse_tools=False)


def prefix_key(engine: Any, cursor: Cursor) -> PrefixKey | None:
    """``PrefixKey`` of the next question from ``cursor``; ``None`` when no request can be
    built from there now (the question itself will say why)."""
    try:
        request = warm_request(cursor)
        adapters = request.adapters if request.adapters is not None else engine.adapters.defaults
        return PrefixKey(prompt=engine.format_prompt(request), adapters=adapters)
    except Exception:  # e.g. an adapter that is not loaded: nothing to warm
        return None


async def warm_prefix(
    engine: Any,
    cursor: Cursor,
    log: Callable[[], LibraryLog | None],
    *,
    after: asyncio.Task[None] | None = None,
) -> None:
    """Send ``warm_request(cursor)``; a failure goes to the log ``log()`` gives then (the
    app's, which may be set after start), if any (see the module docstring). ``after``:
    an earlier warm-up, cancelled and waited for first (its prefix is no longer wanted)."""
    if after is not None and not after.done():
        after.cancel()
        await asyncio.wait([after])
    try:
        response = await engine.agenerate(warm_request(cursor))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # it only saves time: a failure must cost the user nothing
        _note(log, f"{type(exc).__name__}: {exc}")
        return
    if not response.ok:
        _note(log, response.error or response.finish_reason.value)


def _note(log: Callable[[], LibraryLog | None], problem: str) -> None:
    target = log()
    if target is not None:
        target.note(
            "computing the conversation's start into the prefix cache failed (the first "
            f"reply computes it instead): {problem}"
        )
