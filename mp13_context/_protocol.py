# SPDX-License-Identifier: MIT
"""``EngineClient``: all the context layer needs of an engine.

``mp13_engine.Engine`` satisfies it, and so does the scripted
``mp13_context.testing.FakeEngine``. The context layer never imports torch:
it builds ``Request``s and reads ``Response``/``Chunk``s, the engine's
torch-free message types.

Contract the runner relies on:

- ``agenerate(request)`` resolves to a ``Response``; a failing request resolves
  with ``finish_reason=ERROR`` (an exception is tolerated too and recorded).
  Several calls awaited together (``asyncio.gather``) are served as one batch.
- ``astream(request)`` yields ``Chunk``s; the last has ``done=True`` and the
  final ``response``.
- ``cancel(request_id)`` stops a queued or running request; its response then
  has ``finish_reason=CANCELLED`` and the text produced so far.
- ``format_prompt(request)`` is exactly the text ``agenerate`` would feed the
  model; ``count_tokens(text)`` counts tokens with the engine's tokenizer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from mp13_engine import Chunk, Request, Response


@runtime_checkable
class EngineClient(Protocol):
    """The engine interface of the context layer (see the module docstring)."""

    async def agenerate(self, request: Request) -> Response: ...

    def astream(self, request: Request) -> AsyncIterator[Chunk]: ...

    def cancel(self, request_id: str) -> bool: ...

    def format_prompt(self, request: Request) -> str: ...

    def count_tokens(self, text: str) -> int: ...
