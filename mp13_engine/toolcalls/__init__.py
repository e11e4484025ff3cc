# SPDX-License-Identifier: Apache-2.0
"""mp13_engine.toolcalls: one parser for every model family's tool-call wire format.

Torch-free. Each wire format is a ``Profile`` in its own private module,
registered by name (``formats()``, ``get_profile``) and detected from chat
templates (``detect_format``). ``parse`` reads a whole output, ``StreamParser``
the same output as deltas; both give a ``ParsedOutput`` (content, reasoning,
tool calls, errors) and never raise on model output. ``prepare_messages`` and
``tools_system_prompt`` build what goes back to the model.

Formats (``formats()``), by wire syntax:

- tags around JSON: ``hermes`` (``<tool_call>``), ``jamba``, ``minimax``, ``internlm``,
  ``kimi_k2``, ``deepseek_v3``, ``deepseek_v31``, ``xlam``;
- marker then a JSON value: ``mistral``, ``mistral_v11``, ``granite``, ``phi4_mini``,
  ``llama3_json`` (bare ``{"name": ..., "parameters": ...}``);
- raw-text parameters converted with the tool schema: ``qwen3_coder``, ``seed_oss``,
  ``glm45``, ``minimax_m2``;
- Python calls read with ``ast``: ``pythonic``, ``llama4_pythonic``, ``gemma_tool_code``;
- channels: ``harmony`` (gpt-oss).

Streaming callers should pass ``in_reasoning=prompt_opens_reasoning(prompt, fmt)``:
left at ``None``, formats whose templates may open ``<think>`` in the prompt hold
the leading text until a reasoning tag or the end decides what it was.
"""

from mp13_engine.toolcalls._messages import prepare_messages, tools_system_prompt
from mp13_engine.toolcalls._parse import StreamParser, parse, prompt_opens_reasoning
from mp13_engine.toolcalls._profile import Profile
from mp13_engine.toolcalls._registry import detect_format, formats, get_profile, render_calls
from mp13_engine.toolcalls._types import (
    ContentDelta,
    ParsedOutput,
    ReasoningDelta,
    StreamEvent,
    ToolCallCompleted,
)

__all__ = [
    "ContentDelta",
    "ParsedOutput",
    "Profile",
    "ReasoningDelta",
    "StreamEvent",
    "StreamParser",
    "ToolCallCompleted",
    "detect_format",
    "formats",
    "get_profile",
    "parse",
    "prepare_messages",
    "prompt_opens_reasoning",
    "render_calls",
    "tools_system_prompt",
]
