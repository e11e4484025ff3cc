# SPDX-License-Identifier: Apache-2.0
"""Streaming and cancellation: deltas, last chunk, cancel by id / task / close, queued cancel."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_engine import Chunk, Engine, EngineClosedError, EngineError, FinishReason, Request
from mp13_engine._output import Detokenizer

LONG = 1500  # tokens: far more than any test waits for


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=8) as eng:
        yield eng


def _wait_tokens(engine, rid: str, n: int, timeout: float = 30.0) -> int:
    """Wait until request ``rid`` produced ``n`` tokens (engine internals: the test needs steps)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = engine._inflight.get(rid)
        if st is not None and len(st.tokens) >= n:
            return len(st.tokens)
        time.sleep(0.0005)
    raise AssertionError(f"request {rid} did not reach {n} tokens")


def _cancel_counting(engine, rid: str) -> int:
    st = engine._inflight[rid]
    n = len(st.tokens)
    assert engine.cancel(rid) is True
    return n


def test_stream_deltas_concatenate_to_final_text(engine):
    req = Request(
        messages=[{"role": "user", "content": "stream me"}], max_new_tokens=30, min_new_tokens=30
    )
    chunks = list(engine.stream(req))
    assert all(isinstance(c, Chunk) and c.id == req.id for c in chunks)
    assert [c.done for c in chunks].count(True) == 1 and chunks[-1].done
    final = chunks[-1].response
    assert final.finish_reason is FinishReason.LENGTH
    assert "".join(c.text for c in chunks) == final.text
    assert (
        final.raw_text
        == engine.generate(Request(messages=req.messages, max_new_tokens=30)).raw_text
    )


def test_async_stream_matches_sync_stream(engine):
    req = Request(prompt="stream async", max_new_tokens=20)
    sync = list(engine.stream(req))

    async def main():
        return [c async for c in engine.astream(Request(prompt="stream async", max_new_tokens=20))]

    chunks = asyncio.run(main())
    assert "".join(c.text for c in chunks) == "".join(c.text for c in sync)
    assert chunks[-1].response.raw_text == sync[-1].response.raw_text


def test_streams_inside_a_wave_are_demultiplexed(engine):
    reqs = [Request(prompt=f"row {i} " * (i + 1), max_new_tokens=8 + i) for i in range(4)]
    solo = [
        engine.generate(Request(prompt=r.prompt, max_new_tokens=r.max_new_tokens)) for r in reqs
    ]
    streams = [engine.stream(r) for r in reqs]
    finals = []
    for s in streams:
        chunks = list(s)
        finals.append(chunks[-1].response)
        assert "".join(c.text for c in chunks) == chunks[-1].response.text
    assert [f.raw_text for f in finals] == [s.raw_text for s in solo]
    assert max(f.metrics.batch_size for f in finals) > 1


def test_cancel_by_id_within_one_step_others_unaffected(engine):
    others = [Request(prompt=f"keep {i}", max_new_tokens=40, min_new_tokens=40) for i in range(2)]
    expected = [
        engine.generate(Request(prompt=r.prompt, max_new_tokens=40, min_new_tokens=40))
        for r in others
    ]
    victim = Request(prompt="victim", max_new_tokens=LONG, min_new_tokens=LONG)
    futs = [engine.submit(r) for r in (others[0], victim, others[1])]
    _wait_tokens(engine, victim.id, 5)
    n = _cancel_counting(engine, victim.id)
    resp = futs[1].result(timeout=30)
    assert resp.finish_reason is FinishReason.CANCELLED
    assert resp.metrics.completion_tokens - n <= 1
    assert resp.raw_text  # partial text kept
    assert engine.cancel(victim.id) is False  # already finished
    kept = [futs[0].result(timeout=60), futs[2].result(timeout=60)]
    assert [k.raw_text for k in kept] == [e.raw_text for e in expected]
    assert all(k.finish_reason is FinishReason.LENGTH for k in kept)
    assert kept[0].metrics.batch_size == 3


def test_queued_cancel_never_runs(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1) as eng:
        running = Request(prompt="busy", max_new_tokens=LONG, min_new_tokens=LONG)
        queued = Request(prompt="waiting", max_new_tokens=5)
        f_run = eng.submit(running)
        _wait_tokens(eng, running.id, 2)
        f_q = eng.submit(queued)
        assert eng.cancel(queued.id) is True
        r = f_q.result(timeout=5)
        assert r.finish_reason is FinishReason.CANCELLED
        assert r.metrics.batch_size == 0 and r.metrics.completion_tokens == 0
        assert r.metrics.ttft_s is None
        eng.cancel(running.id)
        assert f_run.result(timeout=30).finish_reason is FinishReason.CANCELLED


def test_closing_or_abandoning_a_stream_cancels(engine):
    before = engine.metrics().finish_reasons["cancelled"]
    stream = engine.stream(Request(prompt="closing", max_new_tokens=LONG, min_new_tokens=LONG))
    for _ in stream:
        break
    stream.close()
    resp = stream.result(timeout=30)
    assert resp.finish_reason is FinishReason.CANCELLED
    assert resp.metrics.completion_tokens < LONG

    abandoned = engine.stream(Request(prompt="abandoned", max_new_tokens=LONG, min_new_tokens=LONG))
    rid = abandoned.id
    next(abandoned)
    del abandoned
    gc.collect()
    deadline = time.monotonic() + 30
    while rid in engine._inflight and time.monotonic() < deadline:
        time.sleep(0.001)
    assert rid not in engine._inflight
    assert engine.metrics().finish_reasons["cancelled"] == before + 2


def test_breaking_out_of_async_for_cancels(engine):
    async def main():
        stream = engine.astream(
            Request(prompt="abandon async", max_new_tokens=LONG, min_new_tokens=LONG)
        )
        rid = stream.id
        async for _ in stream:
            break
        del stream
        gc.collect()
        return rid

    before = engine.metrics().finish_reasons["cancelled"]
    rid = asyncio.run(main())
    deadline = time.monotonic() + 30
    while rid in engine._inflight and time.monotonic() < deadline:
        time.sleep(0.001)
    assert rid not in engine._inflight
    assert engine.metrics().finish_reasons["cancelled"] == before + 1


def test_an_async_stream_iterated_in_another_loop_than_its_own_still_wakes(engine):
    """Its wake-ups used to go to the loop that made it: one closed (``asyncio.run``
    twice) or not watching (a loop in another thread), so the stream hung."""

    async def make(prompt: str):
        return engine.astream(Request(prompt=prompt, max_new_tokens=200, min_new_tokens=200))

    async def drain(stream):
        async def all_chunks():
            return [c async for c in stream]

        return await asyncio.wait_for(all_chunks(), 30)

    made_in_a_closed_loop = asyncio.run(make("loop one"))
    chunks = asyncio.run(drain(made_in_a_closed_loop))

    other = asyncio.new_event_loop()
    runner = threading.Thread(target=other.run_forever, daemon=True)
    runner.start()
    try:
        made_elsewhere = asyncio.run_coroutine_threadsafe(make("loop two"), other).result(30)
        chunks_elsewhere = asyncio.run(drain(made_elsewhere))
    finally:
        other.call_soon_threadsafe(other.stop)
        runner.join(30)
        other.close()
    for got in (chunks, chunks_elsewhere):
        assert got[-1].done and got[-1].response.finish_reason is FinishReason.LENGTH
        assert "".join(c.text for c in got) == got[-1].response.text
        assert got[-1].response.metrics.completion_tokens == 200


def test_with_block_cancels_unfinished_stream(engine):
    with engine.stream(Request(prompt="ctx", max_new_tokens=LONG, min_new_tokens=LONG)) as s:
        first = next(s)
        assert first.id == s.id
    assert s.result(timeout=30).finish_reason is FinishReason.CANCELLED


def test_asyncio_task_cancel_cancels_agenerate_and_astream(engine):
    async def main():
        req = Request(prompt="task", max_new_tokens=LONG, min_new_tokens=LONG)
        task = asyncio.create_task(engine.agenerate(req))
        while len(getattr(engine._inflight.get(req.id), "tokens", ())) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        req2 = Request(prompt="task stream", max_new_tokens=LONG, min_new_tokens=LONG)
        seen = []

        async def consume():
            async for c in engine.astream(req2):
                seen.append(c)

        t2 = asyncio.create_task(consume())
        while not seen:
            await asyncio.sleep(0.001)
        t2.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t2
        after = await engine.agenerate("still serving", max_new_tokens=3)
        return req.id, req2.id, after

    before = engine.metrics().finish_reasons["cancelled"]
    id1, id2, after = asyncio.run(main())
    assert after.ok
    deadline = time.monotonic() + 30
    while (id1 in engine._inflight or id2 in engine._inflight) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert engine.metrics().finish_reasons["cancelled"] == before + 2


@pytest.fixture
def fresh_engine(tiny_model_path):
    """An engine of its own: its finish-reason counts are not a window other tests filled."""
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=8) as eng:
        yield eng


def test_cancelling_the_task_awaiting_agenerate_many_cancels_every_request(fresh_engine):
    engine = fresh_engine

    async def main():
        many = [Request(prompt=p, max_new_tokens=LONG, min_new_tokens=LONG) for p in ("c", "d")]
        task = asyncio.create_task(engine.agenerate_many(many))
        while len(getattr(engine._inflight.get(many[1].id), "tokens", ())) < 2:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return [r.id for r in many]

    ids = asyncio.run(main())
    deadline = time.monotonic() + 30
    while any(i in engine._inflight for i in ids) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not any(i in engine._inflight for i in ids)
    assert engine.metrics().finish_reasons["cancelled"] == 2
    assert engine.generate("still serving", max_new_tokens=2).ok


def test_astream_outside_an_event_loop_says_what_to_use_and_queues_nothing(engine):
    """Was: asyncio's bare RuntimeError ("no running event loop"), not an mp13 error."""
    before = engine.metrics().total_requests
    with pytest.raises(EngineError, match=r"running event loop.*engine\.stream") as info:
        engine.astream(Request(prompt="outside", max_new_tokens=2))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not engine._inflight and engine.metrics().total_requests == before


def test_cancel_unknown_id_is_false(engine):
    assert engine.cancel("no-such-request") is False


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_incremental_decoder_never_emits_partial_characters(tiny_tokenizer, text):
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(x):
        return tiny_tokenizer.decode(x, skip_special_tokens=True)

    dec = Detokenizer(decode)
    deltas = [dec.push(i) for i in ids]
    deltas.append(dec.flush())
    whole = decode(ids)
    assert "".join(deltas) == whole
    if "\ufffd" not in text:
        assert all("\ufffd" not in d for d in deltas)


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_path))


def test_streams_with_stop_strings_never_show_cut_text(engine):
    prompts = [f"stop stream {i}" for i in range(6)]
    bases = engine.generate_many([Request(prompt=p, max_new_tokens=20) for p in prompts])
    reqs = []
    for p, base in zip(prompts, bases, strict=True):
        text = base.raw_text
        cuts = [i for i in range(1, len(text) - 1) if text.find(text[i : i + 2]) == i]
        stop = text[cuts[len(cuts) // 2] : cuts[len(cuts) // 2] + 2] if cuts else "§§"
        reqs.append(Request(prompt=p, max_new_tokens=20, stop=[stop]))
    streams = [engine.stream(r) for r in reqs]
    for s in streams:
        chunks = list(s)
        final = chunks[-1].response
        assert "".join(c.text for c in chunks) == final.text
        assert not any(stop in final.text for stop in final_stops(reqs, final.id))


def final_stops(reqs, rid):
    return next(r.stop for r in reqs if r.id == rid)


@pytest.mark.parametrize("timeout", ["5", -1, float("nan"), True, [1]])
def test_a_wait_timeout_that_is_not_seconds_is_refused_before_waiting(tiny_model_path, timeout):
    """A stream's result(timeout) and close(timeout) check the timeout first: close("5")
    used to mark the engine closed and then fail inside Thread.join, half closed."""
    from mp13_engine import EngineError, RequestError

    with Engine.load(str(tiny_model_path), device="cpu", default_max_new_tokens=3) as engine:
        stream = engine.stream("hello")
        with pytest.raises(
            RequestError, match=r"result\(timeout=.*\) is not allowed; use a number"
        ):
            stream.result(timeout)
        assert stream.result(30).ok
        with pytest.raises(EngineError, match=r"close\(timeout=.*seconds >= 0, or None"):
            engine.close(timeout)
        with pytest.raises(EngineError, match=r"aclose\(timeout="):
            asyncio.run(engine.aclose(timeout))
        assert engine.generate("still serving").ok


def test_async_with_engine_and_async_stream(tiny_model_path):
    """``async with`` an engine and its streams: leaving a stream early cancels only its request;
    ``aclose`` does the same; ``result()`` gives each response; leaving the engine closes it."""

    async def main():
        async with await Engine.aload(str(tiny_model_path), device="cpu") as eng:
            long = Request(prompt="ctx", max_new_tokens=LONG, min_new_tokens=LONG)
            async with eng.astream(long) as early:
                first = await anext(early)
            left = await early.result()
            closed = eng.astream(attrs.evolve(long, id=None))
            await anext(closed)
            await closed.aclose()
            assert [c async for c in closed] == []  # a closed stream yields nothing more
            aclosed = await closed.result()
            whole = eng.astream("Hi", max_new_tokens=3)
            chunks = [c async for c in whole]
            done = await whole.result()
        return eng, first, left, aclosed, chunks, done

    eng, first, left, aclosed, chunks, done = asyncio.run(main())
    assert first.id == left.id and not first.done
    assert left.finish_reason is FinishReason.CANCELLED
    assert aclosed.finish_reason is FinishReason.CANCELLED and aclosed.id != left.id
    assert chunks[-1].done and chunks[-1].response == done
    assert done.finish_reason is FinishReason.LENGTH and done.metrics.completion_tokens == 3
    assert "".join(c.text for c in chunks) == done.text
    with pytest.raises(EngineClosedError):
        eng.generate("after", max_new_tokens=1)


def test_giving_up_on_an_async_stream_result_leaves_the_request_running(engine):
    """Was: ``asyncio.wait_for(stream.result(), t)`` timing out cancelled the request (the
    wait chained both ways into the request's future), and every later ``await
    stream.result()`` raised CancelledError instead of returning the response; the sync
    ``RequestStream.result(timeout)`` leaves the request running."""

    async def main():
        req = Request(prompt="patience", max_new_tokens=40, min_new_tokens=40)
        stream = engine.astream(req)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stream.result(), 0.001)
        chunks = [c async for c in stream]
        return chunks, await stream.result()

    chunks, resp = asyncio.run(main())
    assert resp.finish_reason is FinishReason.LENGTH and resp.metrics.completion_tokens == 40
    assert chunks[-1].response == resp and "".join(c.text for c in chunks) == resp.text


def test_a_stream_result_that_times_out_says_so_and_the_request_goes_on(engine):
    """``stream.result(timeout)`` used to raise a bare ``TimeoutError()``: no message."""
    stream = engine.stream(Request(prompt="slow", max_new_tokens=LONG, min_new_tokens=LONG))
    with pytest.raises(TimeoutError, match=rf"request '{stream.id}' did not finish within 0.01 s"):
        stream.result(timeout=0.01)
    assert stream.response is None  # still running
    stream.close()
    assert stream.result(timeout=30).finish_reason is FinishReason.CANCELLED


def test_a_stream_cancels_its_own_request_and_still_ends_on_its_last_chunk(engine):
    """``stream.cancel()`` (was: AttributeError; only ``close()``, which ends the iteration
    at once, or ``engine.cancel(stream.id)``)."""
    stream = engine.stream(Request(prompt="cancel me", max_new_tokens=LONG, min_new_tokens=LONG))
    first = next(stream)
    assert stream.cancel() is True
    rest = list(stream)
    assert rest[-1].done and rest[-1].response.finish_reason is FinishReason.CANCELLED
    resp = stream.result(30)
    assert resp == rest[-1].response and resp.metrics.completion_tokens < LONG
    assert "".join(c.text for c in [first, *rest]) == resp.text
    assert stream.cancel() is False  # already ended

    async def main():
        astream = engine.astream(Request(prompt="async cancel", max_new_tokens=LONG))
        await anext(astream)
        cancelled = astream.cancel()
        return cancelled, [c async for c in astream]

    cancelled, chunks = asyncio.run(main())
    assert cancelled and chunks[-1].response.finish_reason is FinishReason.CANCELLED
