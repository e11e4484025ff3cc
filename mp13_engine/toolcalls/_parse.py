# SPDX-License-Identifier: Apache-2.0
"""Public parsing entry points: ``parse`` (whole text) and ``StreamParser`` (deltas).

``parse`` is a ``StreamParser`` fed the whole text at once, so the two cannot
disagree: for any split of a text into deltas the stream's ``finish()`` equals
``parse`` of the text, and the ``ToolCallCompleted`` events it emitted carry
exactly the final calls. Neither raises on model output.

``tools``: the request's tool specs (OpenAI-style dicts or ``ToolSpec``). Formats
whose parameter values are raw text (``qwen3_coder``, ``glm45``, ``minimax_m2``,
``seed_oss``, ``functiongemma``) type the values by them; values of a tool not
listed are read as JSON where they parse as JSON. They never filter: a call to a
tool not among them is returned like any other, since whether it runs is the
toolbox's decision (``Toolbox.execute`` refuses an unknown tool and says so).

``in_reasoning``: ``True`` when the prompt already opened the reasoning block
(e.g. it ends with ``<think>``), ``False`` when it did not; ``None`` (default)
lets formats that support it detect a leading ``...</think>`` by holding the
leading text until a reasoning tag or the end decides. Streaming callers that
know the prompt should pass a bool (see ``prompt_opens_reasoning``) so content
streams at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from mp13_engine.toolcalls._machine import StreamMachine
from mp13_engine.toolcalls._registry import get_profile
from mp13_engine.toolcalls._types import ParsedOutput, require_text
from mp13_engine.toolcalls._values import ToolLike


class StreamParser(StreamMachine):
    """Incremental parser for one model output: ``feed`` deltas, then ``finish``.

    The stream machine run for the profile of ``format`` (looked up by name).
    """

    def __init__(
        self,
        format: str,
        tools: Iterable[ToolLike] | None = None,
        *,
        in_reasoning: bool | None = None,
    ) -> None:
        self.format = format
        super().__init__(get_profile(format), tools, in_reasoning)


def parse(
    text: str,
    format: str,
    tools: Iterable[ToolLike] | None = None,
    *,
    in_reasoning: bool | None = None,
) -> ParsedOutput:
    """Split a whole model output into content, reasoning, tool calls and errors."""
    parser = StreamParser(format, tools, in_reasoning=in_reasoning)
    parser.feed(text)
    return parser.finish()


def prompt_opens_reasoning(prompt: str, format: str) -> bool:
    """Whether a rendered prompt ends inside an opened reasoning block (``...<think>\\n``)."""
    require_text(prompt, "the prompt prompt_opens_reasoning reads")
    tail = prompt.rstrip()
    return any(tail.endswith(open_tag) for open_tag, _ in get_profile(format).reasoning)
