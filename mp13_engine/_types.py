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
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from mp13_engine._errors import RequestKeywordError
from mp13_engine._request_fields import FIELDS, check_request, new_request_id
from mp13_toolbox import ToolCall, ToolSpec, strict_keywords

#: Adapter name that means "the base model, no adapter".
BASE_ADAPTER = "__base__"


def adapter_names(
    adapters: str | Iterable[str] | None, defaults: Iterable[str] = ()
) -> tuple[str, ...]:
    """The adapters a request runs with: the one reading of ``Request.adapters``.

    ``None`` means ``defaults`` (the engine's default adapters); ``[]``,
    ``"__base__"`` or ``["__base__"]`` mean the base model, ``()``; otherwise
    each name once, in the order given, without ``"__base__"``
    (``["a", "__base__", "a"]`` is ``("a",)``). A single string is one name.
    """
    if adapters is None:
        adapters = defaults
    if isinstance(adapters, str):
        adapters = (adapters,)
    return tuple(dict.fromkeys(n for n in adapters if n != BASE_ADAPTER))


class StrEnum(str, enum.Enum):
    """An enum whose members are their string values: ``str()`` and f-strings give
    ``"stop"``, not ``"FinishReason.STOP"``, on every Python version (``enum.StrEnum``
    arrived in 3.11; mp13 supports 3.10). The base of every mp13 engine enum a user reads."""

    def __str__(self) -> str:
        return str(self.value)


class FinishReason(StrEnum):
    """Why a request stopped producing tokens (``str(reason)`` is its value, ``"stop"``)."""

    STOP = "stop"  # end-of-sequence token or a stop string
    LENGTH = "length"  # max_new_tokens reached
    CANCELLED = "cancelled"  # cancelled by id, task cancellation or closing its stream
    ERROR = "error"  # the request failed; Response.error says why


def as_tuple(value: Any) -> tuple[Any, ...]:
    """A converter: None -> (), one string -> (it,), any other iterable -> a tuple."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _opt_tuple(value: Iterable[TokenLogprob] | None) -> tuple[TokenLogprob, ...] | None:
    """A converter: None stays None (not asked for), any iterable becomes a tuple."""
    return None if value is None else tuple(value)


# ``Request``'s converters: each runs its field's rule (``_request_fields.FIELDS``). Their
# parameter types are what ``Request(...)`` accepts (mypy's attrs plugin reads them); they
# return the field's annotated type, which the rule guarantees.
_ToolLike = Mapping[str, Any] | ToolSpec | Callable[..., Any]


def _messages(v: Sequence[Mapping[str, Any]] | None) -> Any:
    return FIELDS["messages"].check("messages", v)


def _prompt(v: str | None) -> Any:
    return FIELDS["prompt"].check("prompt", v)


def _id(v: str | None) -> Any:
    return FIELDS["id"].check("id", v)


def _max_new_tokens(v: int | None) -> Any:
    return FIELDS["max_new_tokens"].check("max_new_tokens", v)


def _min_new_tokens(v: int) -> Any:
    return FIELDS["min_new_tokens"].check("min_new_tokens", v)


def _do_sample(v: bool | None) -> Any:
    return FIELDS["do_sample"].check("do_sample", v)


def _temperature(v: float | None) -> Any:
    return FIELDS["temperature"].check("temperature", v)


def _top_p(v: float) -> Any:
    return FIELDS["top_p"].check("top_p", v)


def _top_k(v: int) -> Any:
    return FIELDS["top_k"].check("top_k", v)


def _min_p(v: float) -> Any:
    return FIELDS["min_p"].check("min_p", v)


def _repetition_penalty(v: float) -> Any:
    return FIELDS["repetition_penalty"].check("repetition_penalty", v)


def _seed(v: int | None) -> Any:
    return FIELDS["seed"].check("seed", v)


def _stop(v: str | Sequence[str] | None) -> Any:
    return FIELDS["stop"].check("stop", v)


def _adapters(v: str | Sequence[str] | None) -> Any:
    return FIELDS["adapters"].check("adapters", v)


def _tools(v: _ToolLike | Sequence[_ToolLike] | None) -> Any:
    return FIELDS["tools"].check("tools", v)


def _parse_tools(v: bool) -> Any:
    return FIELDS["parse_tools"].check("parse_tools", v)


def _continue_final(v: bool) -> Any:
    return FIELDS["continue_final"].check("continue_final", v)


def _return_prompt(v: bool) -> Any:
    return FIELDS["return_prompt"].check("return_prompt", v)


def _logprobs(v: bool) -> Any:
    return FIELDS["logprobs"].check("logprobs", v)


def _top_logprobs(v: int) -> Any:
    return FIELDS["top_logprobs"].check("top_logprobs", v)


def _chat_template_kwargs(v: Mapping[str, Any] | None) -> Any:
    return FIELDS["chat_template_kwargs"].check("chat_template_kwargs", v)


def _timeout_s(v: float | None) -> Any:
    return FIELDS["timeout_s"].check("timeout_s", v)


@strict_keywords(RequestKeywordError)
@attrs.frozen(kw_only=True)
class Request:
    """One generation request, valid from the moment it exists.

    Give ``messages`` (chat, rendered with the model's chat template) or
    ``prompt`` (raw text, fed as is: control-token text in it is markup).
    Every field is checked when the request is built (and by ``attrs.evolve``):
    a bad value raises ``RequestError`` naming the field, the value and what is
    allowed (see ``mp13_engine.REQUEST_FIELDS`` / ``check_request_field``); a
    misspelt keyword (``temprature=0.7``) raises ``RequestKeywordError`` naming the
    field meant.

    Sampling follows OpenAI, vLLM and Ollama: ``temperature=0`` is greedy
    decoding, a positive ``temperature`` samples at that temperature. Left
    unset (``None``), the request is greedy unless ``do_sample=True``, which
    samples at temperature 1.0. ``do_sample=False`` is always greedy, and
    ``temperature=0`` wins over ``do_sample=True``. ``sampling`` says which it is.
    ``seed`` (0 to 2**64-1) makes a sampled request reproducible, also inside a
    batch; without one each sampled request draws a random seed. As in
    transformers' ``generate``, a sampled request applies the temperature, then
    ``top_k`` (tokens tied with the k-th stay), then ``top_p``, then ``min_p`` (a
    token stays if its probability at that temperature is at least ``min_p`` times
    the most likely token's; 0 turns it off, and the most likely token always
    stays); ``repetition_penalty`` applies greedy or sampled. Only the request's
    values apply: ``top_k`` is off unless set (``generate``'s default is 50), and a checkpoint's
    ``generation_config`` sampling defaults never apply.

    ``adapters``: ``None`` uses the engine's default adapters, ``[]`` or
    ``["__base__"]`` the base model, otherwise the named adapters (several are
    combined, see ``engine.adapters``). ``tools``: OpenAI-style dicts,
    ``mp13_toolbox.ToolSpec``s or plain functions (one or a list), stored as
    OpenAI-style dicts. ``chat_template_kwargs``: extra template variables
    (e.g. ``{"enable_thinking": False}``), never the arguments the engine sets.
    ``timeout_s``: a deadline for the whole request (``None`` = the engine's
    default).

    ``max_new_tokens``: ``None`` = ``EngineConfig.default_max_new_tokens`` (either
    way at most what the context window leaves after the prompt).
    ``min_new_tokens``: the end-of-sequence token is held off until this many
    tokens; it never outlasts ``max_new_tokens`` (the smaller wins), and a stop
    string still ends the reply before it.
    ``stop``: strings that end the reply (``finish_reason=STOP``), matched in the
    decoded text across token boundaries; the earliest wins and is left out of the
    text. The end-of-sequence tokens (the ``generation_config``'s and the
    tokenizer's ``eos_token``) end it too. ``parse_tools=False`` runs no
    tool-call parser: ``text`` is the raw decoded text, reasoning and markup
    included, and ``tool_calls`` stays empty. ``continue_final``: continue the
    last message, which must be an assistant one, instead of starting a reply.
    ``return_prompt``: fill ``Response.prompt`` with the prompt text fed.
    ``logprobs``: fill ``Response.logprobs`` with each generated token's
    log-probability (OpenAI's ``logprobs=True``; see ``TokenLogprob`` for which
    distribution); off, nothing is computed. ``top_logprobs`` (0 to 20, OpenAI's
    name; needs ``logprobs=True``): with each token, that many of the most likely
    tokens of the same distribution (``TokenLogprob.top_logprobs``).

    Text inside messages and tool specs never becomes a control token: a user
    message that spells ``<|im_start|>`` reaches the model as that text.
    """

    messages: tuple[dict[str, Any], ...] | None = attrs.field(
        default=None, converter=_messages, hash=False
    )
    prompt: str | None = attrs.field(default=None, converter=_prompt)
    id: str = attrs.field(factory=new_request_id, converter=_id)
    max_new_tokens: int | None = attrs.field(default=None, converter=_max_new_tokens)
    min_new_tokens: int = attrs.field(default=0, converter=_min_new_tokens)
    do_sample: bool | None = attrs.field(default=None, converter=_do_sample)
    temperature: float | None = attrs.field(default=None, converter=_temperature)
    top_p: float = attrs.field(default=1.0, converter=_top_p)
    top_k: int = attrs.field(default=0, converter=_top_k)
    min_p: float = attrs.field(default=0.0, converter=_min_p)
    repetition_penalty: float = attrs.field(default=1.0, converter=_repetition_penalty)
    seed: int | None = attrs.field(default=None, converter=_seed)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_stop)
    adapters: tuple[str, ...] | None = attrs.field(default=None, converter=_adapters)
    tools: tuple[dict[str, Any], ...] | None = attrs.field(
        default=None, converter=_tools, hash=False
    )
    parse_tools: bool = attrs.field(default=True, converter=_parse_tools)
    continue_final: bool = attrs.field(default=False, converter=_continue_final)
    return_prompt: bool = attrs.field(default=False, converter=_return_prompt)
    logprobs: bool = attrs.field(default=False, converter=_logprobs)
    top_logprobs: int = attrs.field(default=0, converter=_top_logprobs)
    chat_template_kwargs: dict[str, Any] | None = attrs.field(
        default=None, converter=_chat_template_kwargs, hash=False
    )
    timeout_s: float | None = attrs.field(default=None, converter=_timeout_s)

    def __attrs_post_init__(self) -> None:
        check_request(self)

    @property
    def sampling(self) -> bool:
        """Whether this request samples (see the class docstring) rather than decodes greedily."""
        if self.temperature == 0.0 or self.do_sample is False:
            return False
        return self.do_sample is True or self.temperature is not None

    @property
    def sampling_temperature(self) -> float:
        """The temperature a sampled request samples at (1.0 when unset)."""
        return self.temperature if self.temperature else 1.0


@attrs.frozen(kw_only=True)
class RequestMetrics:
    """Measurements of one request. Times are seconds, measured from submission.

    ``prompt_tokens``: the tokens of the prompt fed (``engine.count_tokens`` of
    ``engine.format_prompt``), ``cached_tokens`` of them included;
    ``completion_tokens``: the tokens generated, the end-of-sequence token not
    counted and the tokens of a stop string counted (its text is cut from the
    reply); ``queue_s``: submission → admission (leaving the queue; its prompt is
    then prefilled in chunks that share steps with the other rows);
    ``ttft_s``: submission → the first generated token (None: none was), which a
    stream may show later, as text that could start a stop string or tool-call
    markup is held back; ``total_s``: submission → the final response;
    ``tokens_per_s``: ``completion_tokens`` over the time from leaving the queue
    to the end (prefill included; 0.0 without tokens).
    ``batch_size``: the most rows the request shared a step with (0: it never
    ran: it ended queued, refused, or before its prompt was fully prefilled);
    ``adapters``: the adapters it asked for, resolved (``()``: the base model);
    ``cached_tokens``: prompt tokens whose keys and values came from the
    prefix cache instead of being computed.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    queue_s: float = 0.0
    ttft_s: float | None = None
    total_s: float = 0.0
    tokens_per_s: float = 0.0
    batch_size: int = 0
    adapters: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    cached_tokens: int = 0


@attrs.frozen
class TokenLogprob:
    """One generated token and its log-probability (``Request.logprobs``).

    ``logprob`` is the natural log of the probability the token had in the
    distribution it was chosen from: for a sampled request, the one it was drawn
    from (after ``repetition_penalty``, the end-of-sequence token held off by
    ``min_new_tokens``, the temperature, ``top_k``, ``top_p`` and ``min_p``: what
    transformers' ``generate`` would draw from, ``output_scores`` after the
    warpers); for a greedy request, the model's distribution at temperature 1
    after ``repetition_penalty`` and ``min_new_tokens`` (what ``generate``'s
    ``output_scores`` holds, log-softmaxed). ``token`` is the token id
    (``engine.tokenizer.decode([token])`` shows it).

    ``top_logprobs`` (``Request.top_logprobs``): the most likely tokens of that same
    distribution, most likely first, as ``TokenLogprob``s of their own (with no
    ``top_logprobs``); the chosen token is among them only if it is that likely.
    Tokens the distribution rules out (probability 0: dropped by ``top_k``,
    ``top_p`` or ``min_p``, or the end-of-sequence token held off) are never
    alternatives, so there may be fewer than asked. Empty when not asked for.
    """

    token: int
    logprob: float
    top_logprobs: tuple[TokenLogprob, ...] = attrs.field(default=(), converter=as_tuple)


@attrs.frozen(kw_only=True)
class TextScore:
    """How likely the model finds a given text after a context (``Engine.score``).

    ``logprobs``: one ``TokenLogprob`` per token of the scored continuation, in order:
    the natural log of the probability the model gives that token after the context
    and the continuation's earlier tokens, from its own distribution at temperature 1
    (no penalty, no ``top_k``/``top_p``/``min_p``: what a greedy ``generate`` reports
    as ``Response.logprobs``), with the ``top_logprobs`` most likely tokens of it when
    asked for. ``context_tokens``: the tokens of the rendered context before them.
    ``sum_logprob`` (the log-likelihood of the whole continuation), ``mean_logprob``
    (per token) and ``perplexity`` (``exp(-mean_logprob)``) are read from ``logprobs``.
    """

    logprobs: tuple[TokenLogprob, ...] = attrs.field(
        converter=as_tuple, validator=attrs.validators.min_len(1)
    )
    context_tokens: int

    @property
    def tokens(self) -> tuple[int, ...]:
        """The continuation's token ids, as scored."""
        return tuple(lp.token for lp in self.logprobs)

    @property
    def sum_logprob(self) -> float:
        """The log-probability of the whole continuation (the sum over its tokens)."""
        return math.fsum(lp.logprob for lp in self.logprobs)

    @property
    def mean_logprob(self) -> float:
        """The mean log-probability per token."""
        return self.sum_logprob / len(self.logprobs)

    @property
    def perplexity(self) -> float:
        """``exp(-mean_logprob)``: 1.0 for a text the model is sure of, larger the more
        surprised it is (``inf`` past float range)."""
        try:
            return math.exp(-self.mean_logprob)
        except OverflowError:
            return math.inf


@attrs.frozen(kw_only=True)
class Response:
    """The final result of a request.

    ``text``: the reply content, without tool-call markup and reasoning (all
    of ``raw_text`` when no parser runs: ``Request.parse_tools=False``, or an
    engine without a tool format); ``reasoning``: the reasoning text
    (``<think>`` blocks and the like);
    ``raw_text``: everything decoded, markup and reasoning included (a stop
    string is left out of every field); ``tool_calls``: the calls parsed from
    it. ``parse_errors``: what the tool-call parser could not read (that text
    stays in ``text``; parsing never raises). ``finish_reason``: see
    ``FinishReason``; ``error`` says why when it is ``ERROR`` (``ok`` is False).
    ``prompt``: the prompt text fed, only with ``Request.return_prompt``.
    ``logprobs``: only with ``Request.logprobs`` (``None`` otherwise), one
    ``TokenLogprob`` per generated token, as many as ``metrics.completion_tokens``:
    the end-of-sequence token is left out and the tokens of a stop string are in
    (their text is cut from the reply). A stream's chunks carry text, not tokens:
    the logprobs come with the final ``Response`` (the ``done`` chunk's).
    """

    id: str
    text: str = ""
    raw_text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=as_tuple)
    finish_reason: FinishReason = FinishReason.STOP
    error: str | None = None
    prompt: str | None = None
    metrics: RequestMetrics = attrs.field(factory=RequestMetrics)
    parse_errors: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    logprobs: tuple[TokenLogprob, ...] | None = attrs.field(default=None, converter=_opt_tuple)

    @property
    def ok(self) -> bool:
        """True unless the request failed."""
        return self.finish_reason is not FinishReason.ERROR


@attrs.frozen(kw_only=True)
class Chunk:
    """A streamed piece of a response.

    ``text`` is the new content since the previous chunk (no tool-call markup,
    unless ``Request.parse_tools=False`` or the engine has no tool format);
    ``reasoning`` the new reasoning text; ``tool_call`` is set on the chunk where
    a call closes. The last chunk has ``done=True`` and the final ``response``.
    """

    id: str
    text: str = ""
    reasoning: str = ""
    tool_call: ToolCall | None = None
    done: bool = False
    response: Response | None = None
