# SPDX-License-Identifier: MIT
"""The context's request parameters accept exactly what ``Request`` accepts (issue 11.8).

Before, the context had validators of its own: it accepted ``temperature=0`` (and
seeds of any size) that the engine refused, so every later reply on that branch
ended ``ERROR``. Now both use the engine's rules; these tests hold them together.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_context import PARAMS, ChatContext, Command, CommandError, CommandKind, Session
from mp13_context._settings import REQUEST_PARAMS, validate_params
from mp13_context.testing import FakeEngine
from mp13_engine import REQUEST_FIELDS, FinishReason, Request, RequestError

VALUES = st.one_of(
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([2**63, 2**64 - 1, 2**64, 2**80, -(2**64)]),
    st.floats(-2, 3),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0, 1e-9]),
    st.text(max_size=4),
    st.sampled_from(["0.7", "5", "hot", "", "END"]),
    st.lists(st.text(max_size=3), max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


def test_request_params_are_request_fields_and_the_rest_are_not():
    assert set(REQUEST_PARAMS) <= set(REQUEST_FIELDS)
    assert set(REQUEST_PARAMS) <= set(PARAMS)
    assert not (set(PARAMS) - set(REQUEST_PARAMS)) & set(REQUEST_FIELDS)
    with pytest.raises(TypeError):
        PARAMS["temperature"] = None  # read-only


#: What a value of a parameter needs beside it in a request (``Request``'s checks that span
#: fields); the context checks those when parameters are set or a reply is asked for.
COMPANIONS = {"top_logprobs": {"logprobs": True}}


def _engine_accepts(name, value) -> bool:
    try:
        Request(prompt="x", **COMPANIONS.get(name, {}), **{name: value})
    except RequestError:
        return False
    return True


def _context_accepts(name, value) -> bool:
    try:
        validate_params({name: value})
    except CommandError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(REQUEST_PARAMS), value=VALUES)
def test_the_context_accepts_exactly_what_request_accepts(name, value):
    # None is "back to the default" in the context, not a value
    assert _context_accepts(name, value) is _engine_accepts(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temperature", 0),  # greedy: accepted by both now (the engine refused it before)
        ("temperature", 0.7),
        ("min_p", 0.05),
        ("seed", 2**64 - 1),
        ("stop", "END"),
        ("timeout_s", 30),
        ("logprobs", True),
    ],
)
def test_accepted_values_reach_the_request_unchanged(name, value):
    engine = FakeEngine()
    with Session.open(":memory:") as session:
        cur = ChatContext(session, engine=engine).cursor()
        cur.params.set(**{name: value})
        turn = cur.ask("hi")
        assert turn.finish_reason is not FinishReason.ERROR
        assert getattr(engine.requests[-1], name) == getattr(
            Request(prompt="x", **{name: value}), name
        )


def test_logprobs_set_on_a_branch_reach_the_request_and_the_response():
    engine = FakeEngine()
    with Session.open(":memory:") as session:
        cur = ChatContext(session, engine=engine).cursor()
        cur.params.set(logprobs=True, top_logprobs=3)
        assert cur.params.show() == {"logprobs": True, "top_logprobs": 3}
        cur.ask("hi there")
        request = engine.requests[-1]
        assert request.logprobs is True and request.top_logprobs == 3
        assert cur.request("again").top_logprobs == 3  # what the next ask would send
        cur.ask("plain", logprobs=None, top_logprobs=None)  # back to the defaults
        assert engine.requests[-1].logprobs is False
        assert engine.requests[-1].top_logprobs == 0


def test_top_logprobs_without_logprobs_is_refused_before_anything_is_recorded():
    """Each value is fine alone; together they would make every later request from the
    branch fail (the engine refuses top_logprobs without logprobs), so the context
    refuses them where they are set or asked for, saying what to do, and records nothing."""
    engine = FakeEngine()
    with Session.open(":memory:") as session:
        cur = ChatContext(session, engine=engine).cursor()
        with pytest.raises(CommandError, match="set logprobs=True too") as err:
            cur.params.set(top_logprobs=3)
        assert isinstance(err.value.__cause__, RequestError)
        assert cur.params.show() == {}
        cur.params.set(logprobs=True, top_logprobs=3)
        cur.ask("hi")
        at, sent = cur.node_id, len(engine.requests)
        cid = cur.node.conversation_id
        before = [(n.id, n.commands) for n in session.conversation_nodes(cid)]
        refused = [
            lambda: cur.params.set(logprobs=None),
            lambda: cur.record(Command(kind=CommandKind.PARAMS_SET, params={"logprobs": False})),
            lambda: cur.ask("x", logprobs=False),
            lambda: cur.retry(logprobs=False),
            lambda: cur.continue_(logprobs=False),
            lambda: cur.batch(["a", "b"], logprobs=False),
            lambda: cur.request("a", logprobs=False),
            lambda: cur.with_params(logprobs=False).ask("z"),
        ]
        for call in refused:
            with pytest.raises(CommandError, match="logprobs=True"):
                call()
        assert cur.node_id == at  # nothing recorded: no node, no command
        assert [(n.id, n.commands) for n in session.conversation_nodes(cid)] == before
        assert len(engine.requests) == sent  # nothing sent
        assert cur.params.show() == {"logprobs": True, "top_logprobs": 3}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("seed", -1),
        ("seed", 2**80),
        ("seed", "1"),
        ("temperature", "hot"),
        ("top_k", "5"),
        ("min_p", 1.5),
    ],
)
def test_refused_values_name_the_parameter_and_what_is_allowed(name, value):
    with pytest.raises(CommandError) as err:
        validate_params({name: value})
    assert name in str(err.value) and "must be" in str(err.value)
    assert isinstance(err.value.__cause__, RequestError)


def test_temperature_zero_on_a_real_engine_keeps_the_branch_working(tmp_path):
    """The bug: the context stored temperature=0, the engine refused every later request."""
    from mp13_engine import Engine
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny", family="chatml")
    with Engine.load(str(path), device="cpu") as engine, Session.open(":memory:") as session:
        cur = ChatContext(session, engine=engine).cursor()
        cur.params.set(temperature=0, max_new_tokens=4)
        first = cur.ask("hello")
        second = cur.ask("again")
        assert first.error is None and second.error is None
        assert first.finish_reason is not FinishReason.ERROR
        cur.params.set(temperature=0.9, seed=3)
        assert cur.ask("sampled now").error is None
