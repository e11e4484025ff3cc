# SPDX-License-Identifier: Apache-2.0
"""The format registry: format name -> the private module (one per format) holding its ``PROFILE``.

The map is an immutable constant and modules are imported on first use, so
importing the package has no side effects and loads no format it does not
need. ``_DETECT_ORDER`` lists formats from the most specific template
signature to the most generic (``<tool_call>`` alone means hermes), which is
what makes detection a data lookup instead of an if-chain.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._profile import Profile
from mp13_toolbox import ToolCall

_MODULES = MappingProxyType(
    {
        "hermes": "_hermes",
        "qwen3_coder": "_qwen3_coder",
        "llama3_json": "_llama3_json",
        "pythonic": "_pythonic",
        "llama4_pythonic": "_llama4_pythonic",
        "mistral": "_mistral",
        "mistral_v11": "_mistral_v11",
        "granite": "_granite",
        "phi4_mini": "_phi4_mini",
        "deepseek_v3": "_deepseek_v3",
        "deepseek_v31": "_deepseek_v31",
        "glm45": "_glm45",
        "kimi_k2": "_kimi_k2",
        "harmony": "_harmony",
        "gemma_tool_code": "_gemma_tool_code",
        "internlm": "_internlm",
        "jamba": "_jamba",
        "xlam": "_xlam",
        "minimax": "_minimax",
        "minimax_m2": "_minimax_m2",
        "seed_oss": "_seed_oss",
    }
)

_DETECT_ORDER: tuple[str, ...] = (
    "seed_oss",
    "minimax_m2",
    "qwen3_coder",
    "glm45",
    "kimi_k2",
    "harmony",
    "deepseek_v31",
    "deepseek_v3",
    "mistral_v11",
    "mistral",
    "granite",
    "phi4_mini",
    "internlm",
    "minimax",
    "jamba",
    "xlam",
    "gemma_tool_code",
    "llama4_pythonic",
    "pythonic",
    "llama3_json",
    "hermes",
)


def formats() -> list[str]:
    """The names of all known tool-call formats, sorted."""
    return sorted(_MODULES)


def get_profile(name: str) -> Profile:
    """The ``Profile`` of a format; ``ToolFormatError`` (listing the known names) if unknown."""
    module = _MODULES.get(name) if isinstance(name, str) else None
    if module is None:
        raise ToolFormatError(
            f"unknown tool-call format {name!r}; use one of: {', '.join(formats())} "
            "(or leave tool_format unset to detect it from the chat template)"
        )
    return importlib.import_module(f"mp13_engine.toolcalls.{module}").PROFILE


def detect_format(chat_template: str | None) -> str | None:
    """The tool-call format a chat template asks for, or ``None`` when no signature matches."""
    if not chat_template:
        return None
    for name in _DETECT_ORDER:
        if any(re.search(sig, chat_template) for sig in get_profile(name).detect):
            return name
    return None


def render_calls(calls: Sequence[ToolCall], format: str) -> str:
    """Tool calls written in a format's wire syntax, as its model would emit them."""
    return get_profile(format).render(list(calls))
