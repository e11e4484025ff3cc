# SPDX-License-Identifier: Apache-2.0
"""``seed_oss``: ByteDance Seed-OSS, qwen3_coder-style functions in ``<seed:tool_call>``.

::

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </seed:tool_call>

``<seed:think>...</seed:think>`` is reasoning; ``<seed:eos>`` ends the turn.
Values are raw text converted with the tool's schema when known.
"""

from __future__ import annotations

from collections.abc import Sequence

from mp13_engine.toolcalls._profile import COMMON_STOPS, Opener, Profile
from mp13_engine.toolcalls._qwen3_coder import (
    FUNCTION_OPENER,
    PARAMETERS,
    decode_functions,
    render_function,
)
from mp13_toolbox import ToolCall


def _render(calls: Sequence[ToolCall]) -> str:
    return "\n".join(
        f"<seed:tool_call>\n{render_function(c, '')}\n</seed:tool_call>" for c in calls
    )


PROFILE = Profile(
    name="seed_oss",
    openers=(
        Opener("<seed:tool_call>", ends=("</seed:tool_call>",), verbatim=PARAMETERS),
        FUNCTION_OPENER,
    ),
    decode=decode_functions,
    render=_render,
    reasoning=(("<seed:think>", "</seed:think>"),),
    close_only_reasoning=True,
    stops=(*COMMON_STOPS, "<seed:eos>"),
    lenient_eof=True,
    wrappers=("</seed:tool_call>", "<seed:bos>"),
    detect=(r"<seed:tool_call>", r"seed:think"),
)
