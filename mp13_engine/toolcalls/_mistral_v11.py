# SPDX-License-Identifier: Apache-2.0
"""``mistral_v11``: Mistral tokenizers v11+, ``[TOOL_CALLS]name[ARGS]{...}`` per call.

Tokenizer v11 puts ``[CALL_ID]id`` between the name and ``[ARGS]`` when the
call has an id; v13 dropped it again (both are accepted). The arguments are
one JSON value (``json.dumps`` spacing) ending where its brackets balance.
``[TOOL_CALLS]name{...}`` without ``[ARGS]`` (decoded without special tokens,
or written so by the model) is accepted, as vLLM does: the name runs up to the
arguments' ``{``. The pre-v11 list (``[TOOL_CALLS][{...}]``), which some
v11-era models still write, is accepted too. ``[THINK]...[/THINK]`` is
reasoning; ids are made 9 alphanumerics on the way back.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from mp13_engine.toolcalls._mistral import PROFILE as _MISTRAL
from mp13_engine.toolcalls._values import dumps
from mp13_toolbox import ToolCall


def _render(calls: Sequence[ToolCall]) -> str:
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{dumps(c.arguments)}" for c in calls)


# mistral's markers, decoder, reasoning and message style; only the rendering and the
# template signature differ.
PROFILE = attrs.evolve(
    _MISTRAL, name="mistral_v11", render=_render, detect=(r"\[ARGS\]", r"\[CALL_ID\]")
)
