# SPDX-License-Identifier: Apache-2.0
"""The engine's seam to ``mp13_engine.toolcalls``: format choice, parsing, stream events.

Resolved once per engine at load: the tool-call format is
``EngineConfig.tool_format`` when set (unknown → ``ToolFormatError``), else
detected from the chat template, else ``toolcalls.DEFAULT_FORMAT`` when the
template cannot show tools at all (so ``Request.tools`` never vanish: they go
into the system prompt in that format), else None. With no format (or while the
toolcalls package is absent) ``Response.text`` is the raw decoded text and
stream chunks carry raw text deltas. Parsing never raises on model output.
"""

from __future__ import annotations

import importlib
from typing import Any

from mp13_engine._errors import ToolFormatError
from mp13_engine._types import Chunk, Request


def _import_toolcalls() -> Any:
    try:
        module = importlib.import_module("mp13_engine.toolcalls")
    except ModuleNotFoundError as exc:
        if exc.name not in ("mp13_engine.toolcalls",):
            raise
        return None
    needed = ("formats", "detect_format", "parse", "StreamParser")
    return module if all(hasattr(module, n) for n in needed) else None


def _shows_no_tools(module: Any, tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders no tool specs at all (probed)."""
    probe = getattr(module, "template_support", None)
    return probe is not None and not probe(tokenizer).tools


class ToolWire:
    """Tool-call handling for one engine (immutable after construction)."""

    def __init__(self, module: Any, format: str | None):
        self.module = module
        self.format = format

    @staticmethod
    def check(configured: str | None) -> Any:
        """Validate a configured format name (before any model loads); returns the module."""
        module = _import_toolcalls()
        if configured is None:
            return module
        if module is None:
            raise ToolFormatError(
                f"tool_format={configured!r} was set but tool-call parsing is not available "
                "in this build; leave tool_format unset"
            )
        known = list(module.formats())
        if configured not in known:
            raise ToolFormatError(
                f"unknown tool_format {configured!r}; use one of {', '.join(known)} "
                "or None to detect it from the chat template"
            )
        return module

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, configured: str | None) -> ToolWire:
        module = cls.check(configured)
        if module is None:
            return cls(None, None)
        if configured is not None:
            return cls(module, configured)
        template = getattr(tokenizer, "chat_template", None)
        detected = module.detect_format(template) if isinstance(template, str) else None
        if detected is None and isinstance(template, str) and _shows_no_tools(module, tokenizer):
            detected = module.DEFAULT_FORMAT
        return cls(module, detected)

    @property
    def active(self) -> bool:
        return self.module is not None and self.format is not None

    def _in_reasoning(self, prompt: str | None) -> bool | None:
        opens = getattr(self.module, "prompt_opens_reasoning", None)
        if prompt is None or opens is None:
            return None
        try:
            return bool(opens(prompt, self.format))
        except Exception:
            return None

    def parse(self, raw: str, request: Request, prompt: str | None) -> Any:
        """``ParsedOutput`` of ``raw`` (None when parsing is off for this request)."""
        if not self.active or not request.parse_tools:
            return None
        try:
            return self.module.parse(
                raw,
                self.format,
                tools=list(request.tools) if request.tools else None,
                in_reasoning=self._in_reasoning(prompt),
            )
        except Exception:  # parsers must not raise; if one does, keep the raw text
            return None

    def stream_events(self, state: Any) -> _StreamEvents | None:
        request = state.request
        if not self.active or not request.parse_tools:
            return None
        parser = self.module.StreamParser(
            self.format,
            tools=list(request.tools) if request.tools else None,
            in_reasoning=self._in_reasoning(state.prompt_text),
        )
        return _StreamEvents(state.id, parser)


class _StreamEvents:
    """Feeds raw text deltas to a StreamParser and maps its events to chunks."""

    def __init__(self, request_id: str, parser: Any):
        self._id = request_id
        self._parser = parser

    def feed(self, text: str) -> list[Chunk]:
        return self._chunks(self._parser.feed(text))

    def close(self) -> list[Chunk]:
        return self._chunks(self._parser.close())

    def _chunks(self, events: list[Any]) -> list[Chunk]:
        out = []
        for ev in events:
            kind = type(ev).__name__
            if kind == "ContentDelta":
                out.append(Chunk(id=self._id, text=ev.text))
            elif kind == "ReasoningDelta":
                out.append(Chunk(id=self._id, reasoning=ev.text))
            elif kind == "ToolCallCompleted":
                out.append(Chunk(id=self._id, tool_call=ev.call))
        return out
