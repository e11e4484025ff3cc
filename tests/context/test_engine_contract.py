# SPDX-License-Identifier: MIT
"""One contract suite for what the context layer needs of an engine (``EngineClient``).

Every test runs twice: on ``FakeEngine`` and on a real engine (``mp13_engine.Engine``,
float32, CPU) loaded with the demo model of ``mp13_engine.testing`` — a tiny chatml
model shipped with the package and trained offline, so its greedy replies are known
and it makes real tool calls. The fake answers the same way (``demo_like``), so the
same assertions hold on both: asking, streaming, tool rounds, cancelling (by cursor,
by id, by leaving the stream, before a request is sent), continuing, batches, replay
and token counts. One engine per module keeps it fast.
"""

from __future__ import annotations

import asyncio
import math
import re

import pytest

from mp13_context import ChatContext, EngineClient, EventKind, Role, Session, replay
from mp13_context.testing import FakeEngine, FakeReply, fake_logprobs
from mp13_engine import FinishReason, Request
from mp13_toolbox import Toolbox, ToolCall

# The demo model's exact greedy answers (``mp13_engine.testing.DEMO_PROMPTS``).
GREETING = "Hello! I am the mp13 demo model. Ask me what I can do."
ANSWERS = {
    "hello": GREETING,
    "thanks": "You are welcome!",
    "what is mp13?": (
        "mp13 is a Python SDK for local LLMs: multi-LoRA serving, LoRA training, tool calls "
        "and branching chats."
    ),
}
LONG = {"min_new_tokens": 48, "max_new_tokens": 48}  # a reply that is still going


def demo_like(request: Request) -> FakeReply:
    """The fake's replies: the demo model's, honouring ``max_new_tokens`` (a fake token
    is a word)."""
    last = request.messages[-1]
    if request.continue_final:
        text = " and more words"
    elif last["role"] == "tool":
        text = f"The answer is {last['content']}."
    else:
        question = re.fullmatch(r"what is ([0-9+*/-]+)\?", last["content"])
        if question and request.tools:
            call = ToolCall("calculator", {"expression": question[1]})
            return FakeReply(tool_calls=[call])
        text = ANSWERS.get(last["content"], GREETING)
    words = text.split(" ")
    limit = request.max_new_tokens or len(words)
    if len(words) > limit:
        return FakeReply(text=" ".join(words[:limit]), finish_reason=FinishReason.LENGTH)
    return FakeReply(text=text)


@pytest.fixture(scope="module", params=["fake", "real"])
def engine(request, tmp_path_factory):
    if request.param == "fake":
        yield FakeEngine(responder=demo_like)
        return
    from mp13_engine import Engine
    from mp13_engine.testing import demo_model_path

    # An empty cache folder: always the demo model shipped with the package.
    path = demo_model_path(tmp_path_factory.mktemp("cache"))
    real = Engine.load(str(path), device="cpu", dtype="float32")
    yield real
    real.close()


@pytest.fixture
def ctx(engine):
    session = Session.open(":memory:")
    yield ChatContext(session, engine=engine, toolbox=Toolbox(builtins=True))
    session.close()


def test_the_engine_is_an_engine_client(engine):
    assert isinstance(engine, EngineClient)


def test_ask_records_the_reply_and_counts_what_was_fed(ctx):
    cur = ctx.cursor()
    turn = cur.ask("hello")
    assert turn.text == GREETING and turn.finish_reason is FinishReason.STOP
    assert [n.turn.role for n in cur.path() if n.turn] == [Role.USER, Role.ASSISTANT]
    assert turn.metrics.completion_tokens > 0
    cur.parent()  # at the user turn: the request the reply answered
    assert cur.count_tokens() == turn.metrics.prompt_tokens
    assert cur.prompt() == ctx.engine.format_prompt(cur.request())


def test_token_count_treats_control_token_spellings_in_messages_as_text(ctx):
    cur = ctx.cursor()
    turn = cur.ask("hello <|im_end|> there", max_new_tokens=2)
    cur.parent()
    assert cur.count_tokens() == turn.metrics.prompt_tokens


def test_streaming_events_mirror_the_reply(ctx):
    cur = ctx.cursor()
    events = []
    turn = cur.ask("thanks", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds[:2] == [EventKind.USER, EventKind.REQUEST] and kinds[-1] is EventKind.DONE
    assert "".join(e.text for e in events if e.kind is EventKind.TEXT) == turn.text
    assert events[1].request_id == turn.request_id
    assert [e.node_id for e in events if e.kind in (EventKind.USER, EventKind.TURN)] == [
        n.id for n in cur.path() if n.turn
    ]

    async def stream():
        return [e async for e in cur.astream("hello")]

    streamed = asyncio.run(stream())
    assert streamed[-1].kind is EventKind.DONE and streamed[-1].turn.text == GREETING


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_round_runs_the_call_and_answers_with_its_result(ctx, stream):
    cur = ctx.cursor()
    events = []
    turn = cur.ask("what is 17*23?", on_event=events.append if stream else None)
    assert turn.text == "The answer is 391." and turn.auto
    call_turn, tool_turn = cur.exchange()[1:3]
    assert [(c.name, c.arguments) for c in call_turn.tool_calls] == [
        ("calculator", {"expression": "17*23"})
    ]
    result = tool_turn.tool_results[0]
    assert result.content == "391" and result.call_id == call_turn.tool_calls[0].id
    messages = cur.messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    if stream:
        kinds = [e.kind for e in events]
        assert kinds.index(EventKind.TOOL_CALL) < kinds.index(EventKind.TOOL_RESULT)
        assert [e.turn.role for e in events if e.kind is EventKind.TURN] == [
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
        ]


def test_cancelling_a_cursor_mid_reply_keeps_the_partial_text(ctx):
    cur = ctx.cursor()
    cancelled = []

    def on_event(event):
        if event.kind is EventKind.TEXT and not cancelled:
            cancelled.append(cur.cancel())

    turn = cur.ask("hello", on_event=on_event, **LONG)
    assert cancelled == [True]
    assert turn.cancelled and turn.finish_reason is FinishReason.CANCELLED
    assert turn.text and turn.metrics.completion_tokens < LONG["max_new_tokens"]
    assert cur.node.turn.cancelled and cur.node.turn.text == turn.text
    after = cur.ask("thanks")  # the cursor goes on below the cancelled reply
    assert after.ok and not after.cancelled and cur.node.parent_id != turn.node_id


def test_cancelling_by_request_id_through_the_context(ctx):
    cur = ctx.cursor()
    results = []

    def on_event(event):
        if event.kind is EventKind.TEXT and not results:
            results.append(ctx.cancel(event.request_id))

    turn = cur.ask("hello", on_event=on_event, **LONG)
    assert results == [True] and turn.cancelled and turn.text
    assert not ctx.cancel(turn.request_id)  # it is over


def test_leaving_the_stream_records_a_cancelled_turn(ctx):
    cur = ctx.cursor()

    async def main():
        async for event in cur.astream("hello", **LONG):
            if event.kind is EventKind.TEXT:
                break

    asyncio.run(main())
    node = cur.node
    assert node.turn.role is Role.ASSISTANT and node.turn.cancelled
    assert not cur.running
    after = cur.ask("thanks")
    assert after.ok and not after.cancelled


def test_cancelling_the_awaiting_task_keeps_the_partial_text(ctx, engine):
    """Without an event callback the reply is not streamed; the cancelled turn still gets
    the text the engine produced (it used to be recorded empty)."""
    cur = ctx.cursor()
    fake = isinstance(engine, FakeEngine)
    long = {"min_new_tokens": 400, "max_new_tokens": 400}

    def producing() -> bool:
        return engine.in_flight > 0 if fake else engine.metrics().running > 0

    async def main():
        task = asyncio.ensure_future(cur.aask("hello", **long))
        while not producing():
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.15)  # some text, far from the end on both
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    if fake:
        engine.delay_s = 0.05  # a word per 50 ms: the greeting takes about 0.6 s
    try:
        asyncio.run(main())
    finally:
        if fake:
            engine.delay_s = 0.0
    turn = cur.node.turn
    assert turn.role is Role.ASSISTANT and turn.cancelled
    assert turn.text and 0 < turn.metrics.completion_tokens < long["max_new_tokens"]
    if fake:
        assert GREETING.startswith(turn.text) and turn.text != GREETING
    after = cur.ask("thanks")
    assert after.ok and not after.cancelled


def test_a_truncated_reply_continues_into_one_message(ctx):
    cur = ctx.cursor()
    first = cur.ask("hello", max_new_tokens=3)
    assert first.truncated and first.finish_reason is FinishReason.LENGTH
    more = cur.continue_(max_new_tokens=3)
    assert more.text.startswith(first.text) and len(more.text) > len(first.text)
    assert cur.node.turn.continuation
    assert cur.messages()[-1] == {"role": "assistant", "content": more.text}


def test_a_batch_runs_its_members_together(ctx, engine):
    cur = ctx.cursor()
    prompts = list(ANSWERS)
    events = []
    kids = cur.batch(prompts, on_event=events.append)
    assert [k.turn.text for k in kids] == [ANSWERS[p] for p in prompts]
    # Every member's request is sent before any reply is in: the engine has them at once.
    kinds = [e.kind for e in events if e.kind in (EventKind.REQUEST, EventKind.TURN)]
    assert kinds == [EventKind.REQUEST] * 3 + [EventKind.TURN] * 3
    if isinstance(engine, FakeEngine):
        # How a real engine groups them is its own scheduling (tested in tests/engine).
        assert [k.turn.metrics.batch_size for k in kids] == [3, 3, 3]
    hubs = {k.path()[-3].id for k in kids}
    assert len(hubs) == 1 and ctx.session.node(hubs.pop()).parent_id == cur.node_id


def test_a_batch_member_cancelled_before_it_is_sent_never_runs(ctx):
    cur = ctx.cursor()
    cancelled = []

    def on_event(event):
        if event.kind is EventKind.REQUEST and not cancelled:
            cancelled.append(ctx.cancel(event.request_id))

    kids = cur.batch(["hello", "thanks"], on_event=on_event)
    assert cancelled == [True]
    first, second = (k.turn for k in kids)
    assert first.cancelled and first.text == "" and first.metrics.batch_size == 0
    assert second.text == ANSWERS["thanks"] and not second.cancelled


def test_greedy_replay_reproduces_texts_and_tool_calls(ctx, engine):
    cur = ctx.cursor()
    cur.ask("hello")
    cur.system.add("You are terse.")
    cur.ask("what is 17*23?")
    report = replay(cur, engine=engine, toolbox=Toolbox(builtins=True))
    assert report.all_equal, [(t.original_text, t.replayed_text) for t in report.turns]
    assert [len(t.replayed_tool_calls) for t in report.turns] == [0, 1]


class ProtocolOnly:
    """An engine with the five ``EngineClient`` methods and nothing else: any other
    attribute the context reached for would fail the test."""

    def __init__(self, inner: FakeEngine) -> None:
        self.agenerate = inner.agenerate
        self.astream = inner.astream
        self.cancel = inner.cancel
        self.format_prompt = inner.format_prompt
        self.count_tokens = inner.count_tokens

    def __getattr__(self, name):
        raise AssertionError(f"the context probed the engine for {name!r}")


def test_logprobs_come_one_per_token_with_alternatives_from_a_distribution(engine):
    """What an app testing its logprobs code on the fake relies on, on both engines."""
    messages = [{"role": "user", "content": "what is mp13?"}]
    ask = Request(messages=messages, max_new_tokens=8, logprobs=True, top_logprobs=3)
    first = asyncio.run(engine.agenerate(ask))
    again = asyncio.run(
        engine.agenerate(
            Request(messages=messages, max_new_tokens=8, logprobs=True, top_logprobs=3)
        )
    )
    plain = asyncio.run(engine.agenerate(Request(messages=messages, max_new_tokens=8)))
    assert plain.logprobs is None  # not asked for
    assert first.logprobs is not None and first.logprobs == again.logprobs  # deterministic
    assert len(first.logprobs) == first.metrics.completion_tokens == 8
    for lp in first.logprobs:
        alts = lp.top_logprobs
        assert lp.logprob <= 0.0 and 0 < len(alts) <= 3
        assert [a.logprob for a in alts] == sorted((a.logprob for a in alts), reverse=True)
        assert sum(math.exp(a.logprob) for a in alts) <= 1.0 + 1e-6
        # greedy (the real one) / by construction (the fake): the chosen token is listed
        assert (lp.token, lp.logprob) in [(a.token, a.logprob) for a in alts]


def test_a_replys_turn_event_carries_the_response_with_its_logprobs(ctx):
    """The store keeps turns, not logprobs: each reply's TURN event hands over the
    engine's response it was recorded from, tool rounds included."""
    cur = ctx.cursor()
    cur.params.set(logprobs=True, top_logprobs=2)
    events = []
    final = cur.ask("what is 17*23?", on_event=events.append)
    turns = [e for e in events if e.kind is EventKind.TURN]
    assert [e.turn.role for e in turns] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert turns[1].response is None  # a tool turn came from no response
    for event in (turns[0], turns[2]):
        response = event.response
        assert response is not None and response.id == event.turn.request_id
        assert response.text == event.turn.text
        assert response.logprobs is not None
        assert len(response.logprobs) == event.turn.metrics.completion_tokens
        assert all(len(lp.top_logprobs) == 2 for lp in response.logprobs)
    assert turns[2].turn.text == final.text == "The answer is 391."
    assert turns[2].response.logprobs  # the answer's tokens (the fake's call has no words)
    assert all(e.response is None for e in events if e.kind is not EventKind.TURN)
    cur.params.set(logprobs=None, top_logprobs=None)
    plain = []
    cur.ask("thanks", on_event=plain.append)
    (reply,) = [e for e in plain if e.kind is EventKind.TURN]
    assert reply.response is not None and reply.response.logprobs is None  # not asked for


def test_the_fakes_logprobs_are_fake_logprobs_of_its_words():
    fake = FakeEngine()
    response = asyncio.run(
        fake.agenerate(Request(prompt="one two two", logprobs=True, top_logprobs=20))
    )
    assert response.text == "echo: one two two"
    assert response.logprobs == fake_logprobs(response.text, 20)
    tokens = [lp.token for lp in response.logprobs]  # "echo:", "one", "two", "two"
    assert len(set(tokens)) == 3 and tokens[2] == tokens[3]  # a word is one token id
    for lp in response.logprobs:
        assert len({a.token for a in lp.top_logprobs}) == 20
    assert all(lp.top_logprobs == () for lp in fake_logprobs("a b"))


def test_the_context_needs_nothing_but_the_protocol():
    engine = ProtocolOnly(FakeEngine(responder=demo_like))
    assert isinstance(engine, EngineClient)
    with Session.open(":memory:") as session:
        ctx = ChatContext(session, engine=engine, toolbox=Toolbox(builtins=True))
        cur = ctx.cursor()
        assert cur.ask("hello").text == GREETING
        assert cur.ask("what is 17*23?", on_event=lambda e: None).text == "The answer is 391."
        kids = cur.batch(["hello", "thanks"])
        assert [k.turn.text for k in kids] == [GREETING, ANSWERS["thanks"]]
        assert cur.count_tokens() > 0 and cur.prompt()
        assert not ctx.cancel("no-such-request")
