# SPDX-License-Identifier: Apache-2.0
"""``llama4_pythonic``: Llama 4, pythonic calls optionally in ``<|python_start|>...<|python_end|>``.

Same list syntax and decoding as ``pythonic``; a complete list whose
``<|python_end|>`` was cut is accepted. ``<|eot|>`` / ``<|eom|>`` end the turn.
"""

from __future__ import annotations

from mp13_engine.toolcalls._profile import COMMON_STOPS, MessageStyle, Opener, Profile
from mp13_engine.toolcalls._pythonic import LIST_OPENER, decode_python_list, render_python_list

PROFILE = Profile(
    name="llama4_pythonic",
    openers=(Opener("<|python_start|>", ends=("<|python_end|>",)), LIST_OPENER),
    decode=decode_python_list,
    render=render_python_list,
    stops=(*COMMON_STOPS, "<|eot|>", "<|eom|>"),
    wrappers=("<|python_end|>",),
    lenient_eof=True,
    detect=(r"<\|python_start\|>", r"<\|header_start\|>"),
    messages=MessageStyle(arguments="object"),
)
