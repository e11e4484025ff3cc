# SPDX-License-Identifier: MIT
"""The context layer on a real tiny engine (chatml) with the real toolbox.

Building and loading the model takes several seconds on a busy CPU, so these
tests are marked slow (run with ``pytest -m slow tests/context``).
"""

from __future__ import annotations

import asyncio

import pytest

from mp13_context import ChatContext, EngineClient, Session, replay
from mp13_engine import FinishReason
from mp13_toolbox import Toolbox

pytestmark = pytest.mark.slow

testing = pytest.importorskip("mp13_engine.testing")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from mp13_engine import Engine

    path = testing.build_tiny_model(tmp_path_factory.mktemp("tiny"), family="chatml", seed=0)
    eng = Engine.load(str(path), device="cpu", dtype="float32")
    yield eng
    eng.close()


@pytest.fixture
def ctx(engine):
    session = Session.open(":memory:")
    tb = Toolbox(builtins=True)
    yield ChatContext(session, engine=engine, toolbox=tb)
    session.close()


def test_the_engine_is_an_engine_client(engine):
    assert isinstance(engine, EngineClient)


def test_prompt_is_what_the_engine_feeds(ctx, engine):
    cur = ctx.cursor()
    cur.system.set("You are terse.")
    cur.params.set(max_new_tokens=5)
    cur.ask("Hello there")
    request = cur.request()
    assert cur.prompt() == engine.format_prompt(request)
    assert "You are terse." in cur.prompt()
    assert cur.count_tokens() == engine.count_tokens(cur.prompt())


def test_batch_is_one_wave(ctx):
    cur = ctx.cursor()
    cur.params.set(max_new_tokens=4)
    kids = cur.batch(["one", "two", "three"])
    assert [k.turn.metrics.batch_size for k in kids] == [3, 3, 3]
    assert all(k.turn.finish_reason in (FinishReason.STOP, FinishReason.LENGTH) for k in kids)


def test_greedy_replay_reproduces_texts_and_tool_calls(ctx, engine):
    cur = ctx.cursor()
    cur.params.set(max_new_tokens=8)
    cur.ask("first question")
    cur.system.add("Be helpful.")
    cur.ask("second question")
    report = replay(cur, engine=engine, toolbox=Toolbox(builtins=True))
    assert report.all_equal, [(t.original_text, t.replayed_text) for t in report.turns]


def test_continue_stitches_with_continue_final(ctx):
    cur = ctx.cursor()
    cur.params.set(max_new_tokens=4)
    first = cur.ask("tell me a long story")
    assert first.truncated
    more = cur.continue_()
    assert more.text.startswith(first.text) and len(more.text) >= len(first.text)
    assert cur.messages()[-1] == {"role": "assistant", "content": more.text}


def test_cancel_mid_reply_keeps_partial_text(ctx, engine):
    cur = ctx.cursor()
    # long enough that 0.3 s never finishes it, however fast the engine steps
    cur.params.set(max_new_tokens=1500, min_new_tokens=1500)

    async def main():
        task = asyncio.ensure_future(cur.aask("go on forever", on_event=lambda e: None))
        while cur._request_id is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert cur.cancel()
        return await task

    turn = asyncio.run(main())
    assert turn.cancelled and turn.finish_reason is FinishReason.CANCELLED
    assert turn.metrics is None or turn.metrics.completion_tokens < 1500
    assert cur.node.turn.cancelled
