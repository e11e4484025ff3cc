# SPDX-License-Identifier: Apache-2.0
"""What the engine does with a request's fields: sampling conventions, tool forms, roles,
template arguments and empty prompts (issues 11.8, 12.2, 12.4, 12.7).

Outputs of a random tiny model are meaningless; these tests compare the engine with
itself (greedy vs sampled, one spelling of a request vs another) and check errors.
"""

from __future__ import annotations

import asyncio

import pytest

from mp13_engine import Engine, FinishReason, Request, RequestError
from mp13_toolbox import function_spec


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=8) as eng:
        yield eng


MSGS = [{"role": "user", "content": "tell me a story about seven seas"}]


def _run(engine, **fields):
    r = engine.generate(Request(messages=MSGS, max_new_tokens=12, **fields))
    assert r.ok, r.error
    return r.raw_text


# --- temperature conventions (issue 12.4) -----------------------------------------------


def test_temperature_zero_is_greedy(engine):
    greedy = _run(engine, do_sample=False)
    assert _run(engine, temperature=0) == greedy  # was: an ERROR response
    assert _run(engine, temperature=0.0, seed=3) == greedy
    assert _run(engine) == greedy  # nothing set: greedy, as before


def test_a_positive_temperature_samples_reproducibly_with_a_seed(engine):
    greedy = _run(engine, do_sample=False)
    hot = _run(engine, temperature=2.0, seed=11)
    # was: temperature without do_sample silently decoded greedily
    assert hot != greedy
    assert _run(engine, temperature=2.0, seed=11) == hot
    assert _run(engine, temperature=2.0, seed=11, do_sample=True) == hot
    assert _run(engine, temperature=2.0, seed=12) != hot


def test_explicit_do_sample_false_stays_greedy_and_zero_beats_do_sample(engine):
    greedy = _run(engine, do_sample=False)
    assert _run(engine, temperature=2.0, seed=11, do_sample=False) == greedy
    assert _run(engine, temperature=0, seed=11, do_sample=True) == greedy


def test_do_sample_alone_samples_at_temperature_one(engine):
    assert _run(engine, do_sample=True, seed=5) == _run(engine, temperature=1.0, seed=5)


def test_sampling_mixed_with_greedy_in_one_wave_matches_solo(engine):
    reqs = [
        Request(messages=MSGS, max_new_tokens=10, temperature=t, seed=i)
        for i, t in enumerate([0, 0.8, 0, 1.5])
    ]
    solo = [engine.generate(r).raw_text for r in reqs]
    wave = engine.generate_many(reqs)
    assert [w.raw_text for w in wave] == solo


# --- mistyped fields reach no worker (issue 11.8, 12.7) ---------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": "5"}, "top_k"),
        ({"min_new_tokens": None}, "min_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"seed": "1"}, "seed"),
        ({"seed": 2**80}, "seed"),
    ],
)
def test_mistyped_overrides_raise_a_typed_error_naming_the_field(engine, fields, field):
    for call in (engine.generate, engine.submit, engine.format_prompt):
        with pytest.raises(RequestError) as err:
            call("hi", **fields)
        assert err.value.field == field
    assert engine.generate("still serving", max_new_tokens=2).ok


def test_an_unknown_override_names_the_fields(engine):
    with pytest.raises(RequestError, match=r"no field 'temprature'.*temperature"):
        engine.generate("hi", temprature=0.5)


def test_a_list_of_prompts_is_not_a_request(engine):
    with pytest.raises(RequestError, match="generate_many"):
        engine.generate(["one", "two"])


def test_one_message_given_to_generate_names_what_a_request_is(engine):
    # Not generate_many's "one list of message dicts": generate was given neither.
    with pytest.raises(RequestError, match=r"not one dict; for one message pass it in a list"):
        engine.generate({"role": "user", "content": "hi"})


def test_a_string_is_one_user_message_on_a_chat_model(engine):
    chat = [{"role": "user", "content": "Hello"}]
    assert engine.format_prompt("Hello") == engine.format_prompt(chat)
    assert engine.format_prompt(Request(prompt="Hello")) == "Hello"  # a raw prompt stays raw


def test_cancel_of_an_id_that_is_not_a_string_is_false(engine):
    assert engine.cancel(["not", "an", "id"]) is False
    assert engine.cancel(5) is False


@pytest.mark.parametrize(
    ("requests", "match"),
    [
        ("hi", r"takes a list of requests, not str; wrap a single request as \[request\]"),
        (Request(prompt="hi"), "takes a list of requests, not Request"),
        ({"role": "user", "content": "hi"}, "takes a list of requests, not dict"),
        ([{"role": "user", "content": "hi"}], "one list of message dicts"),
        (5, "takes a list of requests, not int"),
    ],
)
def test_one_request_given_to_generate_many_is_refused_not_split(engine, requests, match):
    """A string was split into one request per character; a message list was refused
    message by message with a hint to use generate_many."""
    before = engine.metrics().requests
    with pytest.raises(RequestError, match=match):
        engine.generate_many(requests, max_new_tokens=1)
    with pytest.raises(RequestError, match=match):
        asyncio.run(engine.agenerate_many(requests, max_new_tokens=1))
    assert engine.metrics().requests == before  # nothing was queued
    assert [r.ok for r in engine.generate_many(("a", "b"), max_new_tokens=1)] == [True] * 2


def test_a_bad_request_inside_generate_many_is_named_by_its_index(engine):
    # It used to get generate's advice "for several prompts use generate_many", with no
    # word of which request was wrong.
    before = engine.metrics().total_requests
    for call in (
        lambda: engine.generate_many(["a", 5], max_new_tokens=1),
        lambda: asyncio.run(engine.agenerate_many(["a", 5], max_new_tokens=1)),
    ):
        with pytest.raises(RequestError, match=r"^requests\[1\]: a request must be") as info:
            call()
        assert "use generate_many" not in str(info.value)
    with pytest.raises(RequestError, match=r"^requests\[0\]: invalid Request.top_k") as info:
        engine.generate_many([Request(prompt="a")], top_k=-1)
    assert info.value.field == "top_k"
    assert engine.metrics().total_requests == before  # nothing was queued


def test_the_advice_for_a_value_that_is_no_request_fits_the_call_and_the_value(engine):
    """Was: every call advised "for several prompts use generate_many", also for a number
    or None (one prompt, not several) and for count_tokens / format_prompt."""
    expected = {
        (engine.generate, ("a", "b")): "; for several prompts use generate_many",
        (engine.count_tokens, ("a", "b")): "; count one request at a time",
        (engine.format_prompt, ("a", "b")): "; format one request at a time",
        (engine.generate, 5): "",
        (engine.count_tokens, None): "",
        (engine.format_prompt, 5.0): "",
    }
    for (call, value), advice in expected.items():
        with pytest.raises(RequestError) as info:
            call(list(value) if isinstance(value, tuple) else value)
        kind = "list" if isinstance(value, tuple) else type(value).__name__
        assert str(info.value) == (
            "a request must be a Request, a prompt string or a list of message dicts, "
            f"not {kind}{advice}"
        )


# --- tools in the forms users try (issue 12.2) ------------------------------------------


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: City name, e.g. Paris.
        unit: celsius or fahrenheit.
    """
    return f"sunny in {city}"


def test_every_tool_form_gives_the_same_prompt(engine):
    spec, _ = function_spec(get_weather)
    forms = [
        [spec.to_openai()],
        spec.to_openai(),
        spec.to_openai()["function"],
        spec,
        [spec],
        get_weather,
        [get_weather],
    ]
    prompts = {engine.format_prompt(Request(messages=MSGS, tools=tools)) for tools in forms}
    assert len(prompts) == 1
    assert "get_weather" in prompts.pop()
    r = engine.generate(Request(messages=MSGS, tools=get_weather, max_new_tokens=3))
    assert r.ok, r.error


def test_a_bad_tool_is_a_typed_error_naming_the_forms(engine):
    with pytest.raises(RequestError, match="OpenAI-style") as err:
        engine.generate(Request(messages=MSGS, tools=["get_weather"]))
    assert err.value.field == "tools"


# --- roles (issue 12.7) ----------------------------------------------------------------


def test_unknown_and_missing_roles_are_typed_errors(engine):
    with pytest.raises(RequestError, match=r"'human'.*system, user, assistant, tool"):
        engine.generate([{"role": "human", "content": "hi"}])
    with pytest.raises(RequestError, match="no 'role'"):
        engine.generate([{"content": "hi"}])


def test_a_role_the_template_does_not_name_is_refused_at_render(engine):
    req = Request(messages=[{"role": "developer", "content": "Be brief."}, *MSGS])
    with pytest.raises(RequestError, match=r"'developer'.*does not handle") as err:
        engine.format_prompt(req)
    assert err.value.field == "messages"
    r = engine.generate(req)
    assert r.finish_reason is FinishReason.ERROR and "developer" in r.error


@pytest.mark.parametrize(("family", "role"), [("llama3", "ipython"), ("mistral", "tool_results")])
def test_a_template_specific_role_is_served_to_its_template(tiny_model_factory, family, role):
    msgs = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call00001",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": role, "tool_call_id": "call00001", "content": "sunny"},
    ]
    with Engine.load(str(tiny_model_factory(family)), device="cpu") as eng:
        assert "sunny" in eng.format_prompt(Request(messages=msgs, tools=get_weather))


# --- chat_template_kwargs (issue 12.7) ------------------------------------------------


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("tools", "Request.tools"),
        ("add_generation_prompt", "Request.continue_final"),
        ("continue_final_message", "Request.continue_final"),
        ("messages", "Request.messages"),
        ("tokenize", "tokenizes it itself"),
    ],
)
def test_template_kwargs_that_collide_name_the_key_and_the_field(engine, key, field):
    with pytest.raises(RequestError) as err:
        engine.generate(Request(messages=MSGS, chat_template_kwargs={key: True}))
    assert repr(key) in str(err.value) and field in str(err.value)
    assert err.value.field == "chat_template_kwargs"


def test_free_template_kwargs_reach_the_template(tiny_model_factory):
    with Engine.load(str(tiny_model_factory("qwen3")), device="cpu") as eng:
        on = eng.format_prompt(Request(messages=MSGS))
        off = eng.format_prompt(
            Request(messages=MSGS, chat_template_kwargs={"enable_thinking": False})
        )
        assert on != off and off.endswith("<think>\n\n</think>\n\n")


# --- empty prompts (issue 12.7) -----------------------------------------------------------


def test_empty_prompt_is_the_same_error_however_it_is_given(engine, tmp_path):
    with pytest.raises(RequestError, match="empty") as built:
        Request(prompt="")
    for call in (engine.generate, engine.format_prompt, engine.submit):
        with pytest.raises(RequestError, match="empty") as err:
            call("")  # was: rendered an empty user turn and ran
        assert str(err.value) == str(built.value)
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "no-template", chat_template=False)
    with Engine.load(str(path), device="cpu") as raw:
        with pytest.raises(RequestError, match="empty"):
            raw.generate("")
        assert raw.generate("x", max_new_tokens=2).ok


def test_an_empty_user_message_is_still_a_chat(engine):
    assert engine.generate([{"role": "user", "content": ""}], max_new_tokens=2).ok


# --- counting ----------------------------------------------------------------------------


def test_count_tokens_of_a_request_is_the_prompt_length_generate_uses(engine):
    req = Request(messages=MSGS, max_new_tokens=2)
    r = engine.generate(req)
    assert engine.count_tokens(req) == r.metrics.prompt_tokens
    assert engine.count_tokens(engine.format_prompt(req)) == r.metrics.prompt_tokens
    assert engine.count_tokens(list(MSGS)) == r.metrics.prompt_tokens
