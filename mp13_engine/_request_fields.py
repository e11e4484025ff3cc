# SPDX-License-Identifier: Apache-2.0
"""What each ``Request`` field accepts: the one validation source for requests.

Concept: ``FIELDS`` maps every ``Request`` field to a rule (a check that returns
the normalised value, and a sentence saying what is allowed). ``Request``'s
attrs converters call these rules, so a request is valid from the moment it
exists; ``mp13_context`` validates its request-mapped parameters with the same
rules (``check_request_field``), so the context and the engine can never
disagree about a value again. What can only be known after rendering (the
prompt's length against the context window, a prompt that renders empty, roles
the model's own template does not handle) stays in the engine, raising the same
``RequestError``.

Invariants:
- Torch-free and transformers-free (``mp13_context`` imports it).
- Every failure is a ``RequestError`` whose ``field`` is the field's name and
  whose message names the field, the bad value and what is allowed.
- Checks never accept a ``bool`` where a number is asked (``True`` is an
  ``int`` in Python, never a sensible ``top_k``), nor a string that looks like a
  number (``top_k="5"``): a mistyped request fails where it is built.
- Tools are normalised to OpenAI-style dicts (``{"type": "function",
  "function": {...}}``) whatever accepted form they came in.
"""

from __future__ import annotations

import json
import math
import numbers
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from mp13_engine._errors import RequestError
from mp13_toolbox import ToolRegistrationError, ToolSpec, did_you_mean, function_spec

#: Roles a message may have, in a request and in training data. The first four are
#: what every chat template handles; ``developer`` (OpenAI's successor of ``system``),
#: ``ipython`` (Llama 3.x tool results), ``tool_results`` (Mistral), ``tools`` and
#: ``tool_response`` (Phi-4-mini's tool list and tool results; ``tool`` is adapted to
#: the latter) are template-specific: the engine serves them only to a template that
#: names them.
CORE_ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
ROLES: tuple[str, ...] = (
    *CORE_ROLES,
    "developer",
    "ipython",
    "tool_results",
    "tools",
    "tool_response",
)

#: ``apply_chat_template`` arguments the engine sets itself -> what to use instead.
#: (A test checks this covers every named argument of transformers' signature.)
RESERVED_TEMPLATE_KWARGS: Mapping[str, str] = MappingProxyType(
    {
        "conversation": "Request.messages",
        "messages": "Request.messages",
        "tools": "Request.tools",
        "add_generation_prompt": "Request.continue_final (False adds the generation prompt)",
        "continue_final_message": "Request.continue_final",
        "chat_template": "a tokenizer saved with the template you want (the engine renders "
        "with the model's own)",
        "tokenize": "nothing: the engine renders to text and tokenizes it itself",
        "sanitize_control_tokens": "nothing: the engine always encodes control-token text "
        "inside messages as text",
        "return_dict": "nothing: the engine renders to text and tokenizes it itself",
        "return_tensors": "nothing: the engine renders to text and tokenizes it itself",
        "return_assistant_tokens_mask": "nothing: training computes its own loss mask",
        "padding": "nothing: the engine pads its batches itself",
        "truncation": "nothing: a prompt longer than the context window is an error",
        "max_length": "Request.max_new_tokens (the engine never truncates a prompt)",
        "tokenizer_kwargs": "nothing: the engine tokenizes with the model's tokenizer",
    }
)

#: The seeds a request accepts: what ``torch.Generator.manual_seed`` takes, minus the
#: negative values it silently wraps around.
SEED_MAX = 2**64 - 1
#: Most stop strings a request may have, and their most characters in all. The
#: engine indexes them (a sort) when the request starts, on the thread that decodes
#: every row: 100,000 take about 0.1 s there, which the other rows wait; a million
#: would stall them over a second. Text that could start one is held back, so the
#: length also bounds what a stream may wait for and the per-token search.
MAX_STOPS = 100_000
MAX_STOP_CHARS = 1_000_000
#: Most alternatives ``Request.top_logprobs`` may ask for per token (OpenAI's bound).
MAX_TOP_LOGPROBS = 20


def new_request_id() -> str:
    """A fresh request id (16 hex digits)."""
    return uuid.uuid4().hex[:16]


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not replace the error about the value
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(name: str, value: Any, allowed: str, why: str = "") -> RequestError:
    detail = f" ({why})" if why else ""
    return RequestError(
        f"invalid Request.{name}={_shown(value)}{detail}; {name} must be {allowed}", field=name
    )


@attrs.frozen
class FieldRule:
    """How one field is checked: ``check(name, value)`` returns the normalised value."""

    check: Callable[[str, Any], Any]
    allowed: str


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _checked(
    allowed: str, ok: Callable[[Any], bool], stored: Callable[[Any], Any], optional: bool
) -> FieldRule:
    """A rule that accepts what ``ok`` accepts (and None when ``optional``), storing
    ``stored(value)``."""

    def check(name: str, value: Any) -> Any:
        if value is None and optional:
            return None
        if not ok(value):
            raise _fail(name, value, allowed)
        return stored(value)

    return FieldRule(check, allowed)


def _int(lo: int, *, optional: bool = False, note: str = "") -> FieldRule:
    allowed = f"an integer >= {lo}" + (", or None" if optional else "") + note
    return _checked(allowed, lambda v: _is_int(v) and v >= lo, int, optional)


def _number(
    lo: float,
    hi: float = math.inf,
    *,
    lo_open: bool = False,
    optional: bool = False,
    note: str = "",
) -> FieldRule:
    left = ">" if lo_open else ">="
    span = f"a number {left} {lo:g}" if hi == math.inf else f"a number in {'(' if lo_open else '['}"
    if hi != math.inf:
        span += f"{lo:g}, {hi:g}]"
    allowed = span + note + (", or None" if optional else "")

    def check(name: str, value: Any) -> float | None:
        if value is None and optional:
            return None
        if not _is_number(value) or not math.isfinite(value):
            raise _fail(name, value, allowed)
        number = float(value)
        if not ((number > lo if lo_open else number >= lo) and number <= hi):
            raise _fail(name, number, allowed)
        return number

    return FieldRule(check, allowed)


def _flag(*, optional: bool = False, note: str = "") -> FieldRule:
    allowed = "True or False" + note + (", or None" if optional else "")
    return _checked(allowed, lambda v: isinstance(v, bool), bool, optional)


def _names(what: str, *, optional: bool) -> FieldRule:
    allowed = f"a non-empty string or a list of them ({what})" + (", or None" if optional else "")

    def check(name: str, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None if optional else ()
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, Sequence) or isinstance(items, (bytes, bytearray)):
            raise _fail(name, value, allowed)
        if not all(isinstance(s, str) and s for s in items):
            raise _fail(name, value, allowed)
        return tuple(items)

    return FieldRule(check, allowed)


def _stops() -> FieldRule:
    names = _names("stop strings", optional=False)
    allowed = (
        f"{names.allowed[:-1]}; at most {MAX_STOPS:,} of them, of at most "
        f"{MAX_STOP_CHARS:,} characters in all)"
    )

    def check(name: str, value: Any) -> tuple[str, ...]:
        try:
            stops: tuple[str, ...] = names.check(name, value)
        except RequestError:
            raise _fail(name, value, allowed) from None
        chars = sum(map(len, stops))
        if len(stops) > MAX_STOPS or chars > MAX_STOP_CHARS:
            raise _fail(
                name,
                value,
                allowed,
                f"{len(stops):,} stop strings, {chars:,} characters in all: more would slow "
                "every running request while this one starts and decodes; keep the ones "
                "that must end the reply and check the reply for the rest",
            )
        return stops

    return FieldRule(check, allowed)


def _id(name: str, value: Any) -> str:
    if value is None:
        return new_request_id()
    if not isinstance(value, str) or not value:
        raise _fail(name, value, _ID_ALLOWED)
    return value


_ID_ALLOWED = "a non-empty string (None or leaving it out makes a fresh one)"


def _prompt(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(name, value, _PROMPT_ALLOWED)
    if not value:
        raise _fail(name, value, _PROMPT_ALLOWED, "the prompt is empty")
    return value


_PROMPT_ALLOWED = "non-empty raw text (fed without a chat template), or None to give messages"


def _content_ok(content: Any) -> bool:
    if content is None or isinstance(content, str):
        return True
    # Multimodal / structured content: a list of parts such as {"type": "text", "text": ...}.
    return isinstance(content, list) and all(isinstance(p, Mapping) for p in content)


def _messages(name: str, value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _fail(name, value, _MESSAGES_ALLOWED)
    if not value:
        raise _fail(name, value, _MESSAGES_ALLOWED, "there is no message")
    for i, message in enumerate(value):
        problem = _message_problem(message)
        if problem is not None:
            raise _fail(name, value, _MESSAGES_ALLOWED, f"message {i} {problem}")
    return tuple(dict(message) for message in value)


def _message_problem(message: Any) -> str | None:
    """What is wrong with one message (its role, content and OpenAI's tool fields), or None.

    The engine adapts the tool fields to each chat template (``toolcalls.prepare_chat``)
    and the templates index into them, so a shape they cannot read is refused here,
    by name, instead of failing inside them.
    """
    if not isinstance(message, Mapping):
        return "is not a dict"
    role = message.get("role")
    if role is None:
        return f"has no 'role'; give one of {ROLES}"
    if role not in ROLES:
        return (
            f"has role {role!r}; the roles are {', '.join(ROLES)} "
            "(use 'user' for the human and 'assistant' for the model)"
        )
    if not _content_ok(message.get("content")):
        return (
            f"has content of type {type(message.get('content')).__name__}; "
            "content is a string, None or a list of part dicts"
        )
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None and not isinstance(message[key], str):
            return f"has {key}={_shown(message[key])}; {key} is a string or None"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        return f"has tool_calls={_shown(calls)}; tool_calls is a list of call dicts"
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            return (
                f"has tool call {j} = {_shown(call)}; a call is "
                "{'type': 'function', 'id': ..., 'function': {'name': ..., 'arguments': {...}}}"
            )
        if not isinstance(fn.get("name"), str):
            return f"has tool call {j} without a name string"
        if not isinstance(fn.get("arguments"), (Mapping, str, type(None))) or not _json_object(
            fn.get("arguments")
        ):
            return (
                f"has tool call {j} with arguments {_shown(fn['arguments'])}; arguments are "
                "a dict or its JSON text"
            )
        call_id = call.get("id") if isinstance(call, Mapping) else None
        if call_id is not None and not isinstance(call_id, str):
            return f"has tool call {j} with id {_shown(call_id)}; an id is a string"
    return None


def _json_object(arguments: object) -> bool:
    """Whether JSON-text arguments decode to an object (a dict, None or blank text pass):
    text that does not would reach the model as a call it never made."""
    if not isinstance(arguments, str) or not arguments.strip():
        return True
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):
        return False


_MESSAGES_ALLOWED = (
    "a non-empty list of message dicts, each with a 'role' and string 'content', "
    "or None to give a raw prompt"
)


def _tool_dict(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """One OpenAI-style tool dict (canonical or the bare function dict), or None if neither."""
    if "function" in spec:
        fn = spec["function"]
        if spec.get("type", "function") != "function" or not isinstance(fn, Mapping):
            return None
        # Keep the caller's key order: templates render the dict as JSON as it is.
        out = dict(spec) if "type" in spec else {"type": "function", **spec}
        out["function"] = dict(fn)
    elif "name" in spec:
        fn, out = spec, {"type": "function", "function": dict(spec)}
    else:
        return None
    name, params = fn.get("name"), fn.get("parameters")
    if not isinstance(name, str) or not name:
        return None
    if params is not None and not isinstance(params, Mapping):
        return None
    if not isinstance(fn.get("description", ""), (str, type(None))):
        return None
    # Chat templates read both (``tool.function.parameters``, ``...description``); OpenAI
    # lets a function leave them out, meaning no parameters and no description.
    function = out["function"]
    if params is None:
        function["parameters"] = {"type": "object", "properties": {}}
    if function.get("description") is None:
        function["description"] = ""
    return out


def _one_tool(name: str, value: Any, item: Any) -> dict[str, Any]:
    if isinstance(item, ToolSpec):
        return item.to_openai()
    if isinstance(item, Mapping):
        spec = _tool_dict(item)
        if spec is None:
            raise _fail(
                name,
                value,
                _TOOLS_ALLOWED,
                f"{_shown(item)} is not a function spec: it needs a 'name' string, an optional "
                "'description' string and an optional 'parameters' JSON-schema dict",
            )
        return spec
    if callable(item) and not isinstance(item, type):
        try:
            tool_spec, _ = function_spec(item)
        except ToolRegistrationError as exc:  # the schema cannot be derived
            raise _fail(name, value, _TOOLS_ALLOWED, str(exc)) from exc
        return tool_spec.to_openai()
    raise _fail(name, value, _TOOLS_ALLOWED, f"a {type(item).__name__} is not a tool")


def _tools(name: str, value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if isinstance(value, (Mapping, ToolSpec)) or callable(value):
        value = [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _fail(name, value, _TOOLS_ALLOWED)
    return tuple(_one_tool(name, value, item) for item in value)


_TOOLS_ALLOWED = (
    "OpenAI-style tool dicts ({'type': 'function', 'function': {...}} or the bare function "
    "dict), mp13_toolbox.ToolSpec objects or plain Python functions (schema from their "
    "signature and docstring), one or a list, or None"
)


def _template_kwargs(name: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _fail(name, value, _KWARGS_ALLOWED)
    for key in value:
        instead = RESERVED_TEMPLATE_KWARGS.get(key)
        if instead is not None:
            raise _fail(
                name,
                value,
                _KWARGS_ALLOWED,
                f"the engine sets {key!r} itself; use {instead}",
            )
    return dict(value)


_KWARGS_ALLOWED = (
    "a dict of extra variables for the chat template (e.g. {'enable_thinking': False}) "
    "without the arguments the engine sets itself, or None"
)


_SAMPLING_NOTE = (
    " (0 = greedy decoding; a positive temperature samples; None = greedy unless "
    "do_sample=True, which samples at 1.0)"
)

#: Field name -> rule, in ``Request``'s field order. Read-only.
FIELDS: Mapping[str, FieldRule] = MappingProxyType(
    {
        "messages": FieldRule(_messages, _MESSAGES_ALLOWED),
        "prompt": FieldRule(_prompt, _PROMPT_ALLOWED),
        "id": FieldRule(_id, _ID_ALLOWED),
        "max_new_tokens": _int(1, optional=True, note=" (the engine's default)"),
        "min_new_tokens": _int(0),
        "do_sample": _flag(
            optional=True, note=" (None = decided by temperature; False = always greedy)"
        ),
        "temperature": _number(0.0, optional=True, note=_SAMPLING_NOTE),
        "top_p": _number(0.0, 1.0, lo_open=True, note=" (1 turns it off)"),
        "top_k": _int(0, note=" (0 turns it off)"),
        "min_p": _number(0.0, 1.0, note=" (0 turns it off)"),
        "repetition_penalty": _number(0.0, lo_open=True, note=" (1 turns it off)"),
        "seed": _checked(
            f"an integer from 0 to 2**64-1 ({SEED_MAX}), or None for a random seed",
            lambda v: _is_int(v) and 0 <= v <= SEED_MAX,
            int,
            optional=True,
        ),
        "stop": _stops(),
        "adapters": _names("adapter names; [] or '__base__' = the base model", optional=True),
        "tools": FieldRule(_tools, _TOOLS_ALLOWED),
        "parse_tools": _flag(),
        "continue_final": _flag(),
        "return_prompt": _flag(),
        "logprobs": _flag(note=" (True fills Response.logprobs)"),
        "top_logprobs": _checked(
            f"an integer from 0 to {MAX_TOP_LOGPROBS} (the most likely alternatives given "
            "with each generated token; more than 0 needs logprobs=True)",
            lambda v: _is_int(v) and 0 <= v <= MAX_TOP_LOGPROBS,
            int,
            optional=False,
        ),
        "chat_template_kwargs": FieldRule(_template_kwargs, _KWARGS_ALLOWED),
        "timeout_s": _number(
            0.0, lo_open=True, optional=True, note=" seconds (None = the engine's default)"
        ),
    }
)

#: Field name -> what it accepts, for help texts and error messages. Read-only.
REQUEST_FIELDS: Mapping[str, str] = MappingProxyType(
    {name: rule.allowed for name, rule in FIELDS.items()}
)


def check_request_field(name: str, value: Any) -> Any:
    """The value ``Request`` would store for field ``name``, or a ``RequestError``.

    This is the check ``Request`` itself runs on construction (and ``attrs.evolve``):
    use it to validate a value before a request exists (``mp13_context`` does, for
    its parameters). Raises ``RequestError`` (``.field`` = ``name``) naming the field,
    the value and what is allowed; an unknown ``name`` is a ``RequestError`` too.
    """
    check_field_names((name,))
    return FIELDS[name].check(name, value)


def check_field_names(names: Iterable[str]) -> None:
    """Raise ``RequestError`` for the first name that is not a ``Request`` field."""
    for name in names:
        if name not in FIELDS:
            raise RequestError(
                f"Request has no field {name!r}{did_you_mean(str(name), FIELDS)}; "
                f"its fields are: {', '.join(FIELDS)}",
                field=name,
            )


def check_request(request: Any) -> None:
    """Checks that span several fields (run after the fields' own checks)."""
    if (request.messages is None) == (request.prompt is None):
        which = "neither" if request.messages is None else "both"
        raise RequestError(
            f"a Request needs exactly one of `messages` (chat) or `prompt` (raw text); it got "
            f"{which}",
            field="messages" if which == "neither" else "prompt",
        )
    if request.continue_final:
        last = request.messages[-1].get("role") if request.messages else None
        if last != "assistant":
            raise RequestError(
                "continue_final=True continues the last message, which must then be an "
                f"assistant message (got {'a raw prompt' if last is None else repr(last)}); "
                "append one or drop continue_final",
                field="continue_final",
            )
    if request.top_logprobs and not request.logprobs:
        raise RequestError(
            f"top_logprobs={request.top_logprobs} gives alternatives to each generated token's "
            "log-probability, which only logprobs=True computes; set logprobs=True too (or "
            "top_logprobs=0)",
            field="top_logprobs",
        )
