# SPDX-License-Identifier: MIT
"""Run a coroutine from synchronous code, with or without a running event loop.

``ask`` and the other sync methods call ``run_sync``. In a thread without a
running loop it is ``asyncio.run``. Inside a running loop (a notebook, an async
app) ``asyncio.run`` would fail and waiting on the loop's own thread would
deadlock, so the coroutine runs on a private loop in a helper thread and the
caller's thread blocks until it is done. The caller's loop is blocked meanwhile:
async code should use the ``a*`` methods (``aask``) instead, and callbacks
passed to a sync call must not need the caller's loop.

Each call gets a new loop, so sync calls from several threads at once never
share one; what they share (the session's store, the engine) is thread-safe.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result (see the module docstring)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    results: list[T] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            results.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=body, name="mp13-context-sync", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
