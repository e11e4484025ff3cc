# SPDX-License-Identifier: Apache-2.0
"""Engine messages: ``Request`` in; ``Chunk`` (streamed) and ``Response`` out.

These are torch-free frozen values so that ``mp13_context`` can build requests
and read responses without importing torch. ``Request.id`` is unique per
request (auto-generated when unset); every ``Chunk`` and the ``Response`` carry
it. ``Response.text`` never contains tool-call markup or reasoning; those are in
``tool_calls`` and ``reasoning``, and ``raw_text`` keeps the decoded output.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

import attrs

from mp13_toolbox import ToolCall

#: Adapter name that means "the base model, no adapter".
BASE_ADAPTER = "__base__"


class FinishReason(str, enum.Enum):
    """Why a request stopped producing tokens."""

    STOP = "stop"  # end-of-sequence token or a stop string
    LENGTH = "length"  # max_new_tokens reached
    CANCELLED = "cancelled"  # cancelled by id, task cancellation or closing its stream
    ERROR = "error"  # the request failed; Response.error says why


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _opt_tuple(value: Any) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _tuple(value: Any) -> tuple:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _messages(value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    return tuple(dict(m) for m in value)


@attrs.frozen(kw_only=True)
class Request:
    """One generation request.

    Give ``messages`` (chat, rendered with the model's chat template) or
    ``prompt`` (raw text, fed as is). ``adapters``: ``None`` uses the engine's
    default adapters, ``[]`` or ``["__base__"]`` the base model, otherwise the
    named adapters (several are combined, see ``engine.adapters``). Sampling is
    on when ``do_sample`` is true; ``seed`` makes a sampled request
    reproducible, also inside a batch. ``timeout_s``: seconds from submission
    after which the request ends ``ERROR`` (None: the engine's
    ``EngineConfig.request_timeout_s``).
    """

    messages: tuple[dict[str, Any], ...] | None = attrs.field(
        default=None, converter=_messages, hash=False
    )
    prompt: str | None = None
    id: str = attrs.field(factory=_new_id)
    max_new_tokens: int | None = None
    min_new_tokens: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    adapters: tuple[str, ...] | None = attrs.field(default=None, converter=_opt_tuple)
    tools: tuple[dict[str, Any], ...] | None = attrs.field(
        default=None, converter=_opt_tuple, hash=False
    )
    parse_tools: bool = True
    continue_final: bool = False
    return_prompt: bool = False
    timeout_s: float | None = None
    chat_template_kwargs: dict[str, Any] | None = attrs.field(default=None, hash=False)


@attrs.frozen(kw_only=True)
class RequestMetrics:
    """Measurements of one request. Times are seconds; ``ttft_s`` is from submission.

    ``batch_size``: the most rows the request shared a step with (0: it never
    ran); ``cached_tokens``: prompt tokens whose keys and values came from the
    prefix cache instead of being computed.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    queue_s: float = 0.0
    ttft_s: float | None = None
    total_s: float = 0.0
    tokens_per_s: float = 0.0
    batch_size: int = 0
    adapters: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    cached_tokens: int = 0


@attrs.frozen(kw_only=True)
class Response:
    """The final result of a request."""

    id: str
    text: str = ""
    raw_text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tuple)
    finish_reason: FinishReason = FinishReason.STOP
    error: str | None = None
    prompt: str | None = None
    metrics: RequestMetrics = attrs.field(factory=RequestMetrics)
    parse_errors: tuple[str, ...] = attrs.field(default=(), converter=_tuple)

    @property
    def ok(self) -> bool:
        """True unless the request failed."""
        return self.finish_reason is not FinishReason.ERROR


@attrs.frozen(kw_only=True)
class Chunk:
    """A streamed piece of a response.

    ``text`` is the new content since the previous chunk (no tool-call markup);
    ``reasoning`` the new reasoning text; ``tool_call`` is set on the chunk where
    a call closes. The last chunk has ``done=True`` and the final ``response``.
    """

    id: str
    text: str = ""
    reasoning: str = ""
    tool_call: ToolCall | None = None
    done: bool = False
    response: Response | None = None
