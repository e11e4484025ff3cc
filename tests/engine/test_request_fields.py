# SPDX-License-Identifier: Apache-2.0
"""``Request`` checks every field where it is built: one rule per field, typed errors.

No model here: these are the construction-time rules (``mp13_engine._request_fields``)
that the engine and ``mp13_context`` share. Rendering-time checks (roles a template does
not handle, prompts that render empty, forging) are in ``test_engine_requests.py`` and
``test_forging.py``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence

import attrs
import pytest

import mp13_engine
import mp13_engine._types
from mp13_engine import (
    REQUEST_FIELDS,
    Mp13Error,
    Request,
    RequestError,
    RequestKeywordError,
    check_request_field,
)
from mp13_engine._request_fields import (
    MAX_STOP_CHARS,
    MAX_STOPS,
    RESERVED_TEMPLATE_KWARGS,
    ROLES,
)
from mp13_toolbox import ToolSpec, function_spec

MSG = [{"role": "user", "content": "hi"}]

# field -> values of the wrong type or range (issue 11.8, issue 12.7)
BAD = {
    "messages": [
        "hi",
        [],
        [{"content": "no role"}],
        [{"role": "human", "content": "x"}],
        [{"role": "user", "content": 5}],
        ["not a dict"],
    ],
    "prompt": ["", 5, b"bytes"],
    "id": ["", 7],
    "max_new_tokens": [0, -1, "5", 2.5, True],
    "min_new_tokens": [None, -1, "0", 1.0, False],
    "do_sample": ["yes", 1, 0.0],
    "temperature": ["hot", -0.1, float("nan"), float("inf"), True],
    "top_p": [0, 0.0, 1.5, "0.9", None, float("nan")],
    "top_k": ["5", -1, 2.0, None, True],
    "min_p": [-0.1, 1.5, "0.1", None, float("nan"), True],
    "repetition_penalty": [0, -1.0, "1.1", None],
    "seed": [-1, "1", 2**64, 2**80, 1.5, True],
    "stop": [5, [""], ["ok", 3], [None]],
    "adapters": [5, [""], [None]],
    "tools": [
        "get_weather",
        5,
        [5],
        [{"description": "no name"}],
        [{"type": "x", "function": {}}],
        [{"name": "f", "parameters": "not a dict"}],
        [{"name": "f", "description": 5}],
        [int],
    ],
    "parse_tools": [None, "yes", 1],
    "continue_final": [None, 1],
    "return_prompt": [None, "no"],
    "logprobs": [None, 1, "yes", 5],
    "top_logprobs": [None, -1, 21, "5", 1.5, True],
    "chat_template_kwargs": ["x", [("a", 1)], {1: "x"}, {"tools": []}],
    "timeout_s": [0, -1, "5", float("inf"), True],
}


def _build(field, value):
    base = {"prompt": "hi"} if field != "prompt" else {}
    if field in ("messages", "continue_final"):
        base = {"messages": MSG} if field != "messages" else {}
    return Request(**base, **{field: value})


def test_every_field_has_a_rule_and_the_bad_values_cover_them():
    assert list(REQUEST_FIELDS) == [a.name for a in attrs.fields(Request)]
    assert set(BAD) == set(REQUEST_FIELDS)


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in BAD.items() for v in values], ids=repr
)
def test_a_bad_value_raises_a_typed_error_naming_the_field(field, value):
    with pytest.raises(RequestError) as err:
        _build(field, value)
    assert err.value.field == field
    assert isinstance(err.value, Mp13Error)
    message = str(err.value)
    assert f"Request.{field}=" in message and f"{field} must be" in message
    # the same rule, before a request exists
    with pytest.raises(RequestError):
        check_request_field(field, value)


def test_an_optional_limit_says_what_none_means_once():
    with pytest.raises(RequestError) as err:
        Request(prompt="hi", max_new_tokens=0)
    assert str(err.value).endswith(
        "max_new_tokens must be an integer >= 1, or None (the engine's default)"
    )


@pytest.mark.parametrize(
    "over",
    [["w"] * (MAX_STOPS + 1), ["x" * (MAX_STOP_CHARS - 9), "0123456789"]],
    ids=["count", "characters"],
)
def test_too_many_stop_strings_are_refused_where_the_request_is_built(over):
    at_limit = over[:MAX_STOPS] if len(over) > MAX_STOPS else [over[0], over[1][:-1]]
    assert Request(prompt="hi", stop=at_limit).stop == tuple(at_limit)
    with pytest.raises(RequestError) as err:
        Request(prompt="hi", stop=over)
    assert err.value.field == "stop"
    message = str(err.value)
    assert f"{MAX_STOPS:,}" in message and f"{MAX_STOP_CHARS:,}" in message  # the limits
    assert "keep the ones that must end the reply" in message  # what to do
    assert len(message) < 800  # the list itself is shown cut short
    with pytest.raises(RequestError, match="at most 100,000"):
        check_request_field("stop", over)


def test_top_logprobs_needs_logprobs_and_says_so():
    with pytest.raises(RequestError) as err:
        Request(prompt="hi", top_logprobs=3)
    assert err.value.field == "top_logprobs"
    assert "set logprobs=True" in str(err.value)
    assert Request(prompt="hi", logprobs=True, top_logprobs=20).top_logprobs == 20
    assert Request(prompt="hi", top_logprobs=0).top_logprobs == 0  # 0: none asked for
    with pytest.raises(RequestError, match="logprobs=True"):
        attrs.evolve(Request(prompt="hi", logprobs=True, top_logprobs=2), logprobs=False)


def test_attrs_evolve_checks_too():
    req = Request(prompt="hi")
    with pytest.raises(RequestError, match="top_k"):
        attrs.evolve(req, top_k="5")


@pytest.mark.parametrize(
    ("field", "value", "stored"),
    [
        ("temperature", 0, 0.0),
        ("temperature", 1, 1.0),
        ("top_p", 1, 1.0),
        ("min_p", 0, 0.0),
        ("min_p", 1, 1.0),
        ("seed", 0, 0),
        ("seed", 2**64 - 1, 2**64 - 1),
        ("stop", "END", ("END",)),
        ("stop", ["a", "b"], ("a", "b")),
        ("stop", None, ()),
        ("adapters", "pirate", ("pirate",)),
        ("adapters", [], ()),
        ("timeout_s", 2, 2.0),
        ("max_new_tokens", None, None),
    ],
)
def test_good_values_are_normalised(field, value, stored):
    assert getattr(_build(field, value), field) == stored
    assert check_request_field(field, value) == stored


def test_unknown_field_is_a_request_error():
    with pytest.raises(RequestError, match=r"no field 'temprature' \(did you mean 'temperature'"):
        check_request_field("temprature", 1.0)


def test_a_misspelt_keyword_is_a_request_error_naming_the_field_meant():
    """Request(temprature=0.7) raised attrs' bare TypeError, with no hint."""
    with pytest.raises(RequestKeywordError) as caught:
        Request(prompt="hi", temprature=0.7)
    message = str(caught.value)
    assert "Request got an unknown keyword 'temprature' (did you mean 'temperature'?)" in message
    assert "Valid keywords: messages, prompt, id" in message
    assert isinstance(caught.value, RequestError)
    assert isinstance(caught.value, Mp13Error)
    with pytest.raises(TypeError, match="did you mean 'max_new_tokens'"):  # as it was caught
        Request(prompt="hi", max_new_token=5)
    with pytest.raises(RequestKeywordError, match="did you mean 'top_p'"):
        attrs.evolve(Request(prompt="hi"), top_pp=0.5)


def test_messages_or_prompt_exactly_one():
    with pytest.raises(RequestError, match="neither"):
        Request()
    with pytest.raises(RequestError, match="both"):
        Request(prompt="a", messages=MSG)


def test_empty_prompt_is_refused_where_it_is_built():
    with pytest.raises(RequestError, match="empty") as err:
        Request(prompt="")
    assert err.value.field == "prompt"


def test_message_without_role_or_with_an_unknown_role_names_the_roles():
    with pytest.raises(RequestError, match="has no 'role'"):
        Request(messages=[{"content": "hi"}])
    with pytest.raises(RequestError) as err:
        Request(messages=[{"role": "human", "content": "hi"}, {"role": "bot", "content": "x"}])
    for role in ("system", "user", "assistant", "tool"):
        assert role in str(err.value)
    for role in ROLES:
        Request(messages=[{"role": role, "content": "x"}])  # known roles are accepted here


def test_none_id_makes_a_fresh_one():
    a, b = Request(prompt="x", id=None), Request(prompt="x", id=None)
    assert a.id and b.id and a.id != b.id


@pytest.mark.parametrize("key", sorted(RESERVED_TEMPLATE_KWARGS))
def test_template_kwargs_the_engine_sets_name_the_field_to_use(key):
    with pytest.raises(RequestError) as err:
        Request(messages=MSG, chat_template_kwargs={key: True})
    assert repr(key) in str(err.value)
    assert RESERVED_TEMPLATE_KWARGS[key] in str(err.value)


def test_reserved_template_kwargs_cover_transformers_own_arguments():
    from transformers import PreTrainedTokenizerBase

    params = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters
    named = {
        n for n, p in params.items() if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }
    # documents is a template variable (RAG), not an engine argument
    assert named - {"documents"} <= set(RESERVED_TEMPLATE_KWARGS)


def test_free_template_kwargs_pass():
    req = Request(messages=MSG, chat_template_kwargs={"enable_thinking": False})
    assert req.chat_template_kwargs == {"enable_thinking": False}


# --- temperature conventions (issue 12.4) -----------------------------------------------


@pytest.mark.parametrize(
    ("fields", "sampling", "temperature"),
    [
        ({}, False, 1.0),  # default: greedy
        ({"temperature": 0}, False, 1.0),  # OpenAI/vLLM/Ollama: 0 = greedy
        ({"temperature": 0.7}, True, 0.7),  # a positive temperature samples
        ({"do_sample": True}, True, 1.0),  # HF style: sample at 1.0
        ({"do_sample": True, "temperature": 0.3}, True, 0.3),
        ({"do_sample": False, "temperature": 0.7}, False, 0.7),  # explicit greedy wins
        ({"do_sample": True, "temperature": 0}, False, 1.0),  # 0 always means greedy
    ],
)
def test_sampling_follows_temperature(fields, sampling, temperature):
    req = Request(prompt="x", **fields)
    assert req.sampling is sampling
    assert req.sampling_temperature == temperature


# --- tools in the forms users try (issue 12.2) ----------------------------------------


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: City name, e.g. Paris.
        unit: celsius or fahrenheit.
    """
    return f"sunny in {city}"


SPEC, _ = function_spec(get_weather)
OPENAI = SPEC.to_openai()


@pytest.mark.parametrize(
    "tools",
    [
        [OPENAI],
        OPENAI,
        [OPENAI["function"]],
        OPENAI["function"],
        [SPEC],
        SPEC,
        [get_weather],
        get_weather,
        (get_weather,),
    ],
    ids=["dicts", "dict", "bare dicts", "bare dict", "specs", "spec", "funcs", "func", "tuple"],
)
def test_every_accepted_tool_form_is_stored_as_openai_dicts(tools):
    assert Request(messages=MSG, tools=tools).tools == (OPENAI,)


def test_a_dict_keeps_its_extra_keys_and_order():
    spec = {"type": "function", "function": {**OPENAI["function"], "strict": True}}
    assert Request(messages=MSG, tools=[spec]).tools == (spec,)


def test_a_bad_tool_names_the_accepted_forms():
    with pytest.raises(RequestError) as err:
        Request(messages=MSG, tools=[get_weather, 42])
    message = str(err.value)
    assert "int is not a tool" in message
    for form in ("OpenAI-style", "ToolSpec", "Python functions"):
        assert form in message


def test_a_function_without_a_usable_schema_is_a_request_error():
    def bad(*args: int) -> None:
        """Varargs cannot come from JSON."""

    with pytest.raises(RequestError, match="args") as err:
        Request(messages=MSG, tools=bad)
    assert err.value.field == "tools"


def test_tool_spec_is_not_mistaken_for_a_mapping():
    assert Request(messages=MSG, tools=ToolSpec(name="noop")).tools[0]["function"]["name"] == "noop"


def test_public_names():
    assert "check_request_field" in mp13_engine.__all__
    assert "REQUEST_FIELDS" in mp13_engine.__all__
    with pytest.raises(TypeError):
        REQUEST_FIELDS["temperature"] = "anything"  # read-only


def test_request_says_what_each_field_accepts():
    """Request's converters are typed functions, so its __init__ (what type checkers and
    help() read) names the accepted types of every field instead of leaving them untyped."""
    hints = typing.get_type_hints(Request.__init__, globalns=vars(mp13_engine._types))
    assert set(hints) - {"return"} == {f.name for f in attrs.fields(Request)}
    assert hints["stop"] == str | Sequence[str] | None
    assert hints["max_new_tokens"] == int | None
    assert hints["messages"] == Sequence[Mapping[str, typing.Any]] | None
