# SPDX-License-Identifier: Apache-2.0
"""``mistral``: Mistral tokenizers before v11, ``[TOOL_CALLS][{...}, ...]``.

``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abc123XYZ"}]``: a JSON
list after the marker, ending where its brackets balance. Call ids are kept;
the templates demand 9 alphanumerics, which ``prepare_messages`` ensures.
``[THINK]...[/THINK]`` is reasoning (Magistral).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mp13_engine.toolcalls._profile import MessageStyle, Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls
from mp13_toolbox import ToolCall

THINK_TAGS = (("[THINK]", "[/THINK]"),)


def _render(calls: Sequence[ToolCall]) -> str:
    items = []
    for c in calls:
        item = {"name": c.name, "arguments": c.arguments}
        if c.id is not None:
            item["id"] = c.id
        items.append(item)
    return "[TOOL_CALLS]" + json.dumps(items, ensure_ascii=False)


PROFILE = Profile(
    name="mistral",
    openers=(Opener("[TOOL_CALLS]"),),
    decode=decode_json_calls,
    render=_render,
    reasoning=THINK_TAGS,
    wrappers=("[TOOL_CALLS]",),
    detect=(r"\[TOOL_CALLS\]",),
    messages=MessageStyle(arguments="object", ids="mistral9"),
)
