# SPDX-License-Identifier: MIT
"""A conversation through ``mp13_context`` reuses the engine's prefix cache on its own.

Each turn's prompt starts with the previous turn's prompt and reply, so the
engine computes only the new tokens; the context layer does nothing for it,
and the replies are those of an engine without the cache.
"""

from __future__ import annotations

import itertools

import pytest

from mp13_context import ChatContext, Session

testing = pytest.importorskip("mp13_engine.testing")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return testing.build_tiny_model(tmp_path_factory.mktemp("tiny"), family="chatml", seed=0)


def _conversation(engine) -> list:
    session = Session.open(":memory:")
    try:
        cur = ChatContext(session, engine=engine).cursor()
        cur.system.set("You answer questions about the weather, briefly and kindly.")
        cur.params.set(max_new_tokens=12)
        return [cur.ask(q) for q in ("Is it raining?", "And tomorrow?", "Thanks!")]
    finally:
        session.close()


def test_later_turns_hit_the_prefix_cache_with_the_same_replies(model_path):
    from mp13_engine import Engine

    with Engine.load(str(model_path), device="cpu", prefix_cache_mb=0) as plain:
        expected = [t.text for t in _conversation(plain)]
    with Engine.load(str(model_path), device="cpu") as engine:
        turns = _conversation(engine)
        saved = engine.metrics().prefix_cache.tokens_saved
    assert [t.text for t in turns] == expected
    assert turns[0].metrics.cached_tokens == 0
    for before, turn in itertools.pairwise(turns):
        # at least every whole block of the previous turn's prompt
        assert turn.metrics.cached_tokens >= before.metrics.prompt_tokens // 32 * 32 > 0
    assert saved == sum(t.metrics.cached_tokens for t in turns)
