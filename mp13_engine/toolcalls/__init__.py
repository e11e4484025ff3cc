# SPDX-License-Identifier: Apache-2.0
"""mp13_engine.toolcalls: one parser for every model family's tool-call wire format.

Torch-free. Each wire format is a ``Profile`` in its own private module,
registered by name (``formats()``, ``get_profile``) and detected from chat
templates (``detect_format``). ``parse`` reads a whole output, ``StreamParser``
the same output as deltas; both give a ``ParsedOutput`` (content, reasoning,
tool calls, errors) and never raise on model output. ``prepare_chat`` (and
``prepare_messages``, ``tools_system_prompt``) build what goes back to the model.

Formats (``formats()``), by wire syntax:

- tags around JSON: ``hermes`` (``<tool_call>``), ``jamba``, ``minimax``, ``internlm``,
  ``kimi_k2``, ``deepseek_v3``, ``deepseek_v31``, ``xlam``, ``phi4_mini``
  (``<|tool_call|>``, or ``functools[...]`` on vLLM's template);
- marker then a JSON value: ``mistral``, ``mistral_v11``, ``granite``,
  ``granite_20b_fc`` (``<function_call> {...}``), ``llama3_json`` (bare
  ``{"name": ..., "parameters": ...}``);
- raw-text parameters converted with the tool schema (its local ``$ref``s and
  ``nullable`` followed): ``qwen3_coder``, ``seed_oss``, ``glm45``, ``minimax_m2``,
  ``functiongemma`` (``call:NAME{k:<escape>v<escape>}``);
- Python calls read with ``ast``: ``pythonic``, ``llama4_pythonic``, ``gemma_tool_code``;
- channels: ``harmony`` (gpt-oss).

A call's arguments may quote the format's own closing tag (a code snippet that
mentions ``</tool_call>``): it is read whole, streaming and whole-text alike.

**Templates without tool support.** A chat template that neither renders
``tools=`` nor shows a known call syntax (SmolLM2's, plain ChatML) gets the
default format ``DEFAULT_FORMAT`` = ``"hermes"``: the engine puts the tools in
the system prompt (``tools_system_prompt``: the specs as JSON lines inside
``<tools>...</tools>`` and an example call), after the template's own default
system prompt when the chat has none, and parses the reply's
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. Past calls go back
in that syntax inside the assistant content, results in tool turns (or user
turns wrapped in ``<tool_response>`` where the template drops tool turns);
``template_support`` finds out what a template renders.

**Adding a format.** ``register_format(Profile(...))`` adds one for this process
(``with register_format(p): ...`` scopes it); it then streams, parses, renders
and is detected like a built-in, and engines loaded afterwards can use it
(``EngineConfig(tool_format=name)``, or through its ``detect`` patterns). A
profile is data for the shared stream machine: ``Opener`` markers, a decoder
``(payload, DecodeContext) -> list[ToolCall]`` that raises ``PayloadError`` on a
malformed payload, a renderer, reasoning tags, stop markers and a
``MessageStyle``. See ``examples/custom_tool_format.py``.

Streaming callers should pass ``in_reasoning=prompt_opens_reasoning(prompt, fmt)``:
left at ``None``, formats whose templates may open ``<think>`` in the prompt hold
the leading text until a reasoning tag or the end decides what it was.
"""

from mp13_engine.toolcalls._messages import (
    prepare_chat,
    prepare_messages,
    tools_system_prompt,
)
from mp13_engine.toolcalls._parse import StreamParser, parse, prompt_opens_reasoning
from mp13_engine.toolcalls._profile import (
    COMMON_STOPS,
    DecodeContext,
    MessageStyle,
    Opener,
    Profile,
    Switch,
)
from mp13_engine.toolcalls._registry import (
    DEFAULT_FORMAT,
    FormatHandle,
    detect_format,
    formats,
    get_profile,
    register_format,
    render_calls,
    unregister_format,
)
from mp13_engine.toolcalls._template import TemplateSupport, template_support
from mp13_engine.toolcalls._types import (
    ContentDelta,
    ParsedOutput,
    ReasoningDelta,
    StreamEvent,
    ToolCallCompleted,
)
from mp13_engine.toolcalls._values import PayloadError, calls_from_json

__all__ = [
    "COMMON_STOPS",
    "DEFAULT_FORMAT",
    "ContentDelta",
    "DecodeContext",
    "FormatHandle",
    "MessageStyle",
    "Opener",
    "ParsedOutput",
    "PayloadError",
    "Profile",
    "ReasoningDelta",
    "StreamEvent",
    "StreamParser",
    "Switch",
    "TemplateSupport",
    "ToolCallCompleted",
    "calls_from_json",
    "detect_format",
    "formats",
    "get_profile",
    "parse",
    "prepare_chat",
    "prepare_messages",
    "prompt_opens_reasoning",
    "register_format",
    "render_calls",
    "template_support",
    "tools_system_prompt",
    "unregister_format",
]
