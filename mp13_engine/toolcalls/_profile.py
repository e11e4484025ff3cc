# SPDX-License-Identifier: Apache-2.0
"""What a wire format is, as data: how its tool markup opens and closes, how to decode it.

A ``Profile`` is an immutable description that the shared stream machine
(``_machine``) runs; a format module only supplies its markers, its payload
decoder and its renderer. Invariants: openers' regexes never end in an
optional part (so a match found in a prefix of the text is the match found in
the whole text), and a profile holds no mutable state, so one profile serves
any number of parsers at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from mp13_toolbox import ToolCall

#: End-of-turn / stop markers that are never content, in any format.
COMMON_STOPS: tuple[str, ...] = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "<end_of_turn>",
    "</s>",
)

THINK = (("<think>", "</think>"),)


@attrs.frozen
class Opener:
    """How one kind of tool-call span starts and ends.

    ``pattern`` is literal text unless ``regex`` is set (then ``partial`` is a
    regex, anchored with ``$``, matching an incomplete opener at the end of a
    buffer). The payload starts right after the match, or at the first
    ``keep_from`` character inside it (openers that are part of the payload,
    such as ``{"name"``). ``ends`` are the closing tags; without them the
    payload is one balanced bracket value (after the ``after`` literal, if set;
    a bracket met before it starts the value too) whose strings use the
    ``quotes`` characters.

    A tag-closed payload may quote its own closing tag as text: inside a string
    opened by one of ``quoted`` (JSON: ``'"'``) or inside a ``verbatim`` region
    (literal ``(open, close)`` pairs, e.g. ``("<escape>", "<escape>")``) a closing
    tag does not end the span. When that reading fails to decode, the span ends
    at the first closing tag after all (so sloppy quoting loses nothing).
    """

    pattern: str
    ends: tuple[str, ...] = ()
    regex: bool = False
    partial: str | None = None
    keep_from: str | None = None
    after: str | None = None
    quotes: str = '"'
    kind: str = ""
    quoted: str = ""
    verbatim: tuple[tuple[str, str], ...] = ()

    def source(self) -> str:
        """``pattern`` as a regular expression (escaped unless ``regex``)."""
        return self.pattern if self.regex else re.escape(self.pattern)


@attrs.frozen
class DecodeContext:
    """What a payload decoder may look at besides the payload text."""

    schemas: Mapping[str, Mapping[str, Any]]
    opener: Opener
    opener_text: str
    truncated: bool = False  # the closing marker never came (only with ``lenient_eof``)


@attrs.frozen
class Switch:
    """A decoder result that changes the machine's mode instead of yielding calls.

    ``mode`` is ``"text"``, ``"reasoning"`` (until one of ``closes``) or
    ``"span"`` (a tool payload until one of ``closes``, decoded by ``decode``).
    """

    mode: str
    closes: tuple[str, ...] = ()
    decode: Decoder | None = None
    quoted: str = ""  # as ``Opener.quoted``, for a ``"span"``


Decoder = Callable[[str, DecodeContext], "list[ToolCall] | Switch"]
Renderer = Callable[[Sequence[ToolCall]], str]


@attrs.frozen
class MessageStyle:
    """How canonical OpenAI-shaped messages are adapted to a format's chat template."""

    arguments: str = "object"  # "object" or "string" (JSON text)
    ids: str = "keep"  # "keep", "none", or a key of _messages.ID_STYLES ("mistral9", "kimi")
    calls_in_content: bool = False  # the template ignores tool_calls: write them into content
    tool_role: str = "tool"
    # A regex: a chat template matching it renders role "tool" itself (under its own
    # header), so results keep role "tool" there instead of becoming ``tool_role``.
    native_tool_role: str = ""
    tool_content: str = "{content}"  # str.format template for a tool result's content
    max_calls: int = 0  # >0: a message with more calls than the template takes -> content
    merge_tool_results: bool = False  # consecutive results become one message (strict turns)
    content_none: str | None = ""  # what a missing assistant content becomes
    # Calls written into content use this renderer (None: the profile's own).
    render: Renderer | None = None
    # The template reads the tool specs (JSON text) from this key of the system message.
    tools_field: str = ""
    # A result's content when the template cannot render a tool turn, so it goes back in
    # a user turn (str.format template; also gets ``name``).
    user_result: str = "{content}"


@attrs.frozen
class Profile:
    """One wire format: markers, decoder, renderer, template signature, message style."""

    name: str
    openers: tuple[Opener, ...]
    decode: Decoder
    render: Renderer
    reasoning: tuple[tuple[str, str], ...] = ()
    close_only_reasoning: bool = False  # "...</think>" when the prompt opened the block
    stops: tuple[str, ...] = COMMON_STOPS
    # Format tokens dropped wherever they appear (an opener listed here is dropped when
    # what follows it is not a payload).
    wrappers: tuple[str, ...] = ()
    lenient_eof: bool = False  # accept a complete payload that misses its closing tag
    detect: tuple[str, ...] = ()  # regexes: a template matching any of them uses this format
    messages: MessageStyle = MessageStyle()
    # (regex, style): a chat template matching the regex gets that style instead of
    # ``messages`` (the first match wins). Templates of one format differ in what they read.
    variants: tuple[tuple[str, MessageStyle], ...] = ()

    def style_for(self, chat_template: str | None) -> MessageStyle:
        """The message style for ``chat_template`` (``messages`` unless a variant matches)."""
        for pattern, style in self.variants:
            if chat_template and re.search(pattern, chat_template):
                return style
        return self.messages
