# SPDX-License-Identifier: MIT
"""``EngineClient``: all the context layer needs of an engine, and nothing more.

``mp13_engine.Engine`` satisfies it, and so does the scripted
``mp13_context.testing.FakeEngine``; the shared contract suite
(``tests/context/test_engine_contract.py``) runs the context layer against
both. The context layer never imports torch: it builds ``Request``s and reads
``Response``/``Chunk``s, the engine's torch-free message types. It uses these
five methods and never probes for others.

Contract the runner relies on:

- ``agenerate(request)`` resolves to a ``Response``; a failing request resolves
  with ``finish_reason=ERROR`` (an exception is tolerated too and recorded).
  Requests that are in flight together are batched by the engine (a batch's
  members are sent one after another without waiting, see ``Cursor.abatch``).
- ``astream(request)`` yields ``Chunk``s; the last has ``done=True`` and the
  final ``response``.
- ``cancel(request_id)`` stops a queued or running request; its response then
  has ``finish_reason=CANCELLED`` and the text produced so far.
- ``format_prompt(request)`` is the text ``agenerate`` would feed the model;
  ``count_tokens(request)`` counts the tokens it feeds (message text that
  spells control tokens counted as text), ``count_tokens(text)`` the tokens of
  a string.
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

    def count_tokens(self, text: str | Request) -> int: ...
