# SPDX-License-Identifier: Apache-2.0
"""Values produced by the tool-call parsers: the parse result and the stream events.

Invariants: ``ParsedOutput.content`` and ``reasoning`` are trimmed text with no
tool-call markup, no reasoning markup and no stop markers; ``tool_calls`` holds
only complete calls (a malformed or truncated payload never yields a partial
call); ``errors`` has one human-readable line per payload that was rejected.
Concatenating a stream's ``ContentDelta.text`` values gives the final
``content`` exactly (likewise for reasoning), and its ``ToolCallCompleted``
events carry exactly the final ``tool_calls``, in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mp13_engine._errors import ToolFormatError
from mp13_engine._types import as_tuple
from mp13_toolbox import ToolCall


def require_text(value: object, what: str, *, optional: bool = False) -> None:
    """``ToolFormatError`` unless ``value`` is a str (or ``None`` where ``optional``)."""
    if not isinstance(value, str) and not (optional and value is None):
        also = " (or None)" if optional else ""
        raise ToolFormatError(f"{what} is a str{also}, not {type(value).__name__}")


def require_list(value: object, kinds: type | tuple[type, ...], what: str) -> list[Any]:
    """``value`` as a list; ``ToolFormatError`` (``what``: "tools is a list of ...") unless
    it is a collection of ``kinds`` (text or a single dict is not)."""
    items = None
    if not isinstance(value, (str, bytes, Mapping)) and isinstance(value, Iterable):
        items = list(value)
    if items is None or not all(isinstance(item, kinds) for item in items):
        raise ToolFormatError(f"{what}, not {value!r:.60}")
    return items


@attrs.frozen
class ParsedOutput:
    """Model output split into visible content, reasoning and tool calls."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=as_tuple)
    errors: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)


@attrs.frozen
class ContentDelta:
    """A piece of visible content, emitted as soon as it cannot be the start of markup."""

    text: str


@attrs.frozen
class ReasoningDelta:
    """A piece of reasoning text (``<think>`` blocks, harmony analysis channel, ...)."""

    text: str


@attrs.frozen
class ToolCallCompleted:
    """A tool call whose payload has just closed; ``index`` counts calls from 0."""

    call: ToolCall
    index: int


StreamEvent = ContentDelta | ReasoningDelta | ToolCallCompleted
