# SPDX-License-Identifier: Apache-2.0
"""``xlam``: Salesforce xLAM, a JSON list of ``{"name": ..., "arguments": {...}}``.

xLAM writes the list bare, or after ``[TOOL_CALLS]``, or inside ``<tool_call>``
tags or a ```` ```json ```` block; all four are accepted (as vLLM's xLAM parser
does). A bare list is recognised by its ``[{"name"`` start. Past calls go back
with their arguments as objects: xLAM's templates write each call's
``function`` (or its ``arguments``) through ``tojson``, and the model's own
list has objects there. Its templates carry no special token; the system
prompt's "Salesforce xLAM" / "single JSON array" wording identifies them.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import Opener, Profile
from mp13_engine.toolcalls._values import decode_json_calls, json_list

PROFILE = Profile(
    name="xlam",
    openers=(
        Opener("<tool_call>", ends=("</tool_call>",), quoted='"'),
        Opener("```json", ends=("```",), quoted='"'),
        Opener("[TOOL_CALLS]"),
        Opener(
            r'\[\s*\{\s*"name"',
            regex=True,
            partial=r'\[\s*(?:\{\s*(?:"(?:n(?:a(?:m(?:e)?)?)?)?)?)?$',
            keep_from="[",
        ),
    ),
    decode=decode_json_calls,
    render=json_list(),
    reasoning=(("<think>", "</think>"),),
    detect=(r"Salesforce xLAM", r"make calls in a single JSON array"),
)
