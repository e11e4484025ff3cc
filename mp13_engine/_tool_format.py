# SPDX-License-Identifier: Apache-2.0
"""``ToolCallFormat``: the engine's tool-call wire format, and a fresh parser per request.

The engine's one seam to ``mp13_engine.toolcalls``, resolved once per engine at
load: the format is ``EngineConfig.tool_format`` when set (unknown →
``ToolFormatError``), else detected from the chat template, else
``toolcalls.DEFAULT_FORMAT`` when the template cannot show tools at all (so
``Request.tools`` never vanish: they go into the system prompt in that format),
else None: the template renders tools itself, in a call syntax no format
matches. That last case is logged as a warning at load, naming the two ways out
(``tool_format=``, ``register_format``), since otherwise the model's calls would
only show up, unparsed, in ``Response.text``. With no format, or for a request
with ``parse_tools=False``, there is no parser: ``Response.text`` is the raw
decoded text and stream chunks carry raw text deltas. Parsing never raises
on model output (see ``_output`` for what happens if a parser does anyway).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from mp13_engine import toolcalls
from mp13_engine._types import Request

_log = logging.getLogger(__name__)


@attrs.frozen
class ToolCallFormat:
    """The tool-call format one engine parses (``name``; None: replies are not parsed)."""

    name: str | None

    @staticmethod
    def check(configured: str | None) -> None:
        """Validate a configured format name (before any model loads).

        An unknown name raises the registry's ``ToolFormatError``, which lists the known formats.
        """
        if configured is not None:
            toolcalls.get_profile(configured)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, configured: str | None) -> ToolCallFormat:
        """The configured format, else the one the chat template shows, else the default."""
        cls.check(configured)
        if configured is not None:
            return cls(configured)
        template = getattr(tokenizer, "chat_template", None)
        detected = toolcalls.detect_format(template) if isinstance(template, str) else None
        if detected is None and isinstance(template, str):
            if not toolcalls.template_support(tokenizer).tools:  # (probed) shows no specs
                detected = toolcalls.DEFAULT_FORMAT
            else:
                _log.warning(
                    "the chat template renders tools, but its tool-call syntax matches no "
                    "known format, so replies will not be parsed for tool calls (they stay "
                    "in Response.text); set EngineConfig.tool_format to one of "
                    "mp13_engine.toolcalls.formats(), or add the format with "
                    "mp13_engine.toolcalls.register_format before loading"
                )
        return cls(detected)

    def parser(self, request: Request, prompt: str | None) -> toolcalls.StreamParser | None:
        """A fresh stream parser for ``request`` (None when it gets no tool-call parsing).

        Knowing the prompt tells the parser whether the reply starts inside a
        reasoning block, so content streams at once instead of being held.
        """
        if self.name is None or not request.parse_tools:
            return None
        in_reasoning = (
            toolcalls.prompt_opens_reasoning(prompt, self.name) if prompt is not None else None
        )
        return toolcalls.StreamParser(
            self.name,
            tools=list(request.tools) if request.tools else None,
            in_reasoning=in_reasoning,
        )
