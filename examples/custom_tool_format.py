# SPDX-License-Identifier: Apache-2.0
"""Teach mp13 a tool-call format it does not ship, without waiting for a release.

The format below is modelled on Cohere Command R's tool use (``Action: ```json [...]```
with ``tool_name`` / ``parameters``). Adding it takes the ~25 lines between the markers:
a ``Profile`` (how a call opens and closes, how its payload decodes and renders, which
chat templates use it) registered with ``toolcalls.register_format``. The shared stream
machine then parses it streaming and whole, renders past calls in it, detects it in
chat templates, and engines loaded afterwards use it.

Run: python examples/custom_tool_format.py
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence

from mp13_engine import toolcalls
from mp13_engine.toolcalls import COMMON_STOPS, DecodeContext, Opener, Profile
from mp13_toolbox import ToolCall

# --- the whole format -------------------------------------------------------------------


def decode(payload: str, ctx: DecodeContext) -> list[ToolCall]:
    """``[{"tool_name": ..., "parameters": {...}}, ...]``; raises PayloadError if malformed."""
    return toolcalls.calls_from_json(payload, name_keys=("tool_name",), args_keys=("parameters",))


def render(calls: Sequence[ToolCall]) -> str:
    items = [{"tool_name": c.name, "parameters": c.arguments} for c in calls]
    return "Action: ```json\n" + json.dumps(items, ensure_ascii=False) + "\n```"


COMMAND_R = Profile(
    name="command_r",
    # The JSON list sits between the opener and the closing fence; a fence *inside* a
    # JSON string (a markdown argument) is text, thanks to quoted='"'.
    openers=(Opener("Action: ```json", ends=("```",), quoted='"'),),
    decode=decode,
    render=render,
    stops=(*COMMON_STOPS, "<|END_OF_TURN_TOKEN|>"),
    detect=(r"Action: ```json",),  # a chat template mentioning this uses the format
)

# --- using it ---------------------------------------------------------------------------


def main() -> None:
    with toolcalls.register_format(COMMAND_R):  # scoped: unregistered at the end
        print("registered formats include command_r:", "command_r" in toolcalls.formats())
        reply = (
            "Plan: look the weather up.\nAction: ```json\n"
            '[{"tool_name": "get_weather", "parameters": {"city": "Paris", "note": "```ok```"}}]'
            "\n```<|END_OF_TURN_TOKEN|>"
        )
        out = toolcalls.parse(reply, "command_r")
        print("content   :", out.content)
        print("tool calls:", [(c.name, c.arguments) for c in out.tool_calls])

        stream = toolcalls.StreamParser("command_r")
        events = [ev for i in range(0, len(reply), 7) for ev in stream.feed(reply[i : i + 7])]
        streamed = [ev.call for ev in events if isinstance(ev, toolcalls.ToolCallCompleted)]
        print("streamed in 7-char pieces, same calls:", streamed == list(out.tool_calls))
        again = toolcalls.parse(toolcalls.render_calls(out.tool_calls, "command_r"), "command_r")
        print("render -> parse round trip:", again.tool_calls == out.tool_calls)
        template = "{{ 'Write Action: ```json [...]``` to call a tool.' }}{{ messages }}"
        print("detected from a template:", toolcalls.detect_format(template))

        # An engine loaded now can use it: here a tiny model whose chat template has no tool
        # support, so the tools and the format's syntax go into the system prompt.
        from mp13_engine import Engine, Request
        from mp13_engine.testing import build_tiny_model

        with tempfile.TemporaryDirectory() as tmp:
            path = build_tiny_model(tmp, family="smollm2")
            with Engine.load(path, device="cpu", tool_format="command_r") as engine:
                tools = [{"type": "function", "function": {"name": "get_weather"}}]
                request = Request(messages=[{"role": "user", "content": "Hi"}], tools=tools)
                prompt = engine.format_prompt(request)
                print("engine format:", engine.tool_format)
                print("prompt shows the tools in this syntax:", "Action: ```json" in prompt)
    print("unregistered again:", "command_r" not in toolcalls.formats())


if __name__ == "__main__":
    main()
