# SPDX-License-Identifier: Apache-2.0
"""Per-request metrics, rolling aggregates, tool-call parsing wiring, the public surface."""

from __future__ import annotations

import threading
import time

import pytest

from mp13_engine import Engine, EngineMetrics, FinishReason, Request
from mp13_engine._metrics import MetricsRecorder, _percentile
from mp13_engine._streams import RequestState
from mp13_engine._types import RequestMetrics, Response


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", metrics_window=5) as eng:
        yield eng


def test_request_metrics_are_consistent(engine):
    r = engine.generate(Request(prompt="metrics", max_new_tokens=6, min_new_tokens=6))
    m = r.metrics
    assert m.completion_tokens == 6
    assert m.prompt_tokens == engine.count_tokens(engine.format_prompt(Request(prompt="metrics")))
    assert 0 <= m.queue_s <= m.ttft_s <= m.total_s
    assert m.tokens_per_s > 0
    assert m.batch_size == 1
    assert m.adapters == ()


def test_aggregates_over_the_last_n_requests(engine):
    for i in range(7):
        engine.generate(Request(prompt=f"agg {i}", max_new_tokens=3, min_new_tokens=3))
    before = engine.metrics().rejected
    engine.generate(Request(prompt="bad", adapters=["no-such-adapter"]))
    agg = engine.metrics()
    assert isinstance(agg, EngineMetrics)
    assert agg.window == 5 and agg.requests == 5
    assert agg.total_requests >= 8
    # The refused request never ran: counted apart, not in the window's figures.
    assert agg.rejected == before + 1
    assert agg.finish_reasons["error"] == 0 and agg.finish_reasons["length"] == 5
    assert agg.completion_tokens == 15
    assert agg.throughput_tokens_per_s > 0
    assert agg.latency_p50_s <= agg.latency_p95_s
    assert agg.ttft_p50_s <= agg.ttft_p95_s
    assert agg.queue_depth == 0 and agg.running == 0


def test_metrics_of_an_idle_engine_count_every_finish_reason_at_zero(tiny_model_path):
    """Was: ``finish_reasons`` was ``{}`` until a request ran, so reading
    ``metrics().finish_reasons["error"]`` on a fresh engine raised KeyError."""
    zeros = {r.value: 0 for r in FinishReason}
    assert MetricsRecorder(window=4).snapshot(0, 0).finish_reasons == zeros
    assert EngineMetrics(window=4).finish_reasons == zeros
    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        idle = eng.metrics()
        assert idle.finish_reasons == zeros
        assert (idle.requests, idle.total_requests, idle.rejected) == (0, 0, 0)
        assert idle.latency_p50_s is None and idle.throughput_tokens_per_s == 0.0
        eng.generate(Request(prompt="bad", adapters=["no-such-adapter"]))  # never runs
        after = eng.metrics()
        assert after.finish_reasons == zeros  # only requests that ran are in the window
        assert (after.total_requests, after.rejected) == (1, 1)


def test_recorder_percentiles_and_counts():
    rec = MetricsRecorder(window=100)
    for i in range(20):
        resp = Response(
            id=str(i),
            finish_reason=FinishReason.STOP if i % 2 else FinishReason.LENGTH,
            metrics=RequestMetrics(
                completion_tokens=10, total_s=float(i + 1), ttft_s=0.1 * i, batch_size=1
            ),
        )
        rec.record(0.0, float(i + 1), resp)
    snap = rec.snapshot(queue_depth=3, running=2)
    assert snap.latency_p50_s == 10.0  # the 10th of 20: half of them are at or below it
    assert snap.latency_p95_s == 19.0
    assert snap.finish_reasons == {"stop": 10, "length": 10, "cancelled": 0, "error": 0}
    assert snap.throughput_tokens_per_s == pytest.approx(200 / 20)
    assert (snap.queue_depth, snap.running) == (3, 2)
    assert _percentile([], 0.5) is None


@pytest.mark.parametrize(
    ("values", "p50", "p95"),
    [
        ([7.0], 7.0, 7.0),
        ([2.0, 1.0], 1.0, 2.0),
        ([4.0, 3.0, 2.0, 1.0], 2.0, 4.0),
        ([6.0, 5.0, 4.0, 3.0, 2.0, 1.0], 3.0, 6.0),
        ([float(i) for i in range(100, 0, -1)], 50.0, 95.0),
    ],
)
def test_percentiles_are_nearest_rank_on_every_window_size(values, p50, p95):
    """Was: ``round(q * (n - 1))`` with Python's half-to-even rounding, so p50 of two
    values was the smaller, of four the third, of six the third again, and of 100
    the 51st: a p50 that took the upper or the lower middle depending on the count."""
    assert (_percentile(values, 0.5), _percentile(values, 0.95)) == (p50, p95)
    assert _percentile(values, 0.07) == sorted(values)[max(0, -(-7 * len(values) // 100) - 1)]


def test_a_window_of_one_request_reports_its_own_figures():
    rec = MetricsRecorder(window=3)
    m = RequestMetrics(completion_tokens=8, total_s=2.0, ttft_s=0.5, batch_size=2)
    rec.record(10.0, 12.0, Response(id="one", metrics=m))
    snap = rec.snapshot(0, 0)
    assert (snap.latency_p50_s, snap.latency_p95_s) == (2.0, 2.0)
    assert (snap.ttft_p50_s, snap.ttft_p95_s) == (0.5, 0.5)
    assert snap.throughput_tokens_per_s == 4.0 and snap.mean_batch_size == 2.0


def test_throughput_counts_idle_time_and_the_sums_are_of_the_window():
    rec = MetricsRecorder(window=2)
    for i, (start, end) in enumerate([(0.0, 1.0), (5.0, 6.0), (9.0, 10.0)]):
        m = RequestMetrics(prompt_tokens=3 + i, completion_tokens=10, total_s=1.0, batch_size=i + 1)
        rec.record(start, end, Response(id=str(i), metrics=m))
    snap = rec.snapshot(0, 0)
    # The window keeps the last two: 20 tokens from 5.0 to 10.0, three idle seconds included.
    assert (snap.requests, snap.total_requests) == (2, 3)
    assert snap.throughput_tokens_per_s == pytest.approx(20 / 5.0)
    assert (snap.prompt_tokens, snap.completion_tokens) == (4 + 5, 20)
    assert snap.mean_batch_size == pytest.approx(2.5)


def _drive(engine, req, prompt, ids, watched=True):
    """Feed ``ids`` to a request state as the worker would; return (response, chunks)."""
    st = RequestState(
        req, prompt, engine._state.tokens.encode(prompt), output=engine._output, watched=watched
    )
    assert st.start()
    for tok in ids:
        assert st.append(tok) is False
    assert st.finish(FinishReason.STOP)
    chunks = []
    while (chunk := st.pop_chunk()) is not None:
        chunks.append(chunk)
    return st.response, chunks


def test_tool_calls_are_parsed_into_the_response_and_stream(engine):
    assert engine.tool_format == "hermes"
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    req = Request(messages=[{"role": "user", "content": "weather?"}], tools=tools)
    prompt = engine.format_prompt(req)
    assert "get_weather" in prompt
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    text = f"Let me check.<tool_call>\n{call}\n</tool_call>"
    resp, chunks = _drive(engine, req, prompt, engine._state.tokens.encode(text))
    assert resp.raw_text == text
    assert resp.text == "Let me check."
    assert [c.name for c in resp.tool_calls] == ["get_weather"]
    assert resp.tool_calls[0].arguments == {"city": "Paris"}
    assert "".join(c.text for c in chunks) == resp.text
    assert [c.tool_call.name for c in chunks if c.tool_call] == ["get_weather"]
    assert chunks[-1].done and chunks[-1].response is resp
    raw = Request(messages=req.messages, tools=tools, parse_tools=False)
    resp2, _ = _drive(engine, raw, prompt, engine._state.tokens.encode(text), watched=False)
    assert resp2.text == text and resp2.tool_calls == ()


def test_tool_markup_that_is_a_special_token_survives_decoding(tiny_model_factory):
    """[TOOL_CALLS] is a special token in real Mistral tokenizers (and in the tiny one):
    dropping special tokens when decoding would hide every tool call; BOS and padding
    must still go."""
    with Engine.load(str(tiny_model_factory("mistral")), device="cpu") as engine:
        tokenizer = engine.tokenizer
        markup = tokenizer.convert_tokens_to_ids("[TOOL_CALLS]")
        assert tokenizer.added_tokens_decoder[markup].special
        req = Request(messages=[{"role": "user", "content": "weather?"}])
        prompt = engine.format_prompt(req)
        call = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
        encode = engine._state.tokens.encode
        ids = [tokenizer.bos_token_id, tokenizer.pad_token_id, *encode("Sure."), markup]
        ids += encode(call)
        resp, chunks = _drive(engine, req, prompt, ids)
    assert resp.raw_text == "Sure.[TOOL_CALLS]" + call  # markup kept, BOS and padding gone
    assert resp.text == "Sure."
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert [c.tool_call.name for c in chunks if c.tool_call] == ["get_weather"]


def test_the_engine_says_its_device_and_dtype(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", dtype="bfloat16") as engine:
        assert (engine.device, engine.dtype) == ("cpu", "bfloat16")
        assert str(engine.model.dtype) == "torch.bfloat16"


# ----- each RequestMetrics field means what its docstring says, measured from outside


def test_times_agree_with_a_clock_around_the_call(tiny_model_path):
    """With one row at a time, the second request waits in the queue while the first
    runs: its ``queue_s`` covers the first's run; a stream's first text comes no earlier
    than ``ttft_s``; ``tokens_per_s`` is the tokens over the time out of the queue."""
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1) as eng:
        reqs = [Request(prompt=f"q {i}", max_new_tokens=12, min_new_tokens=12) for i in range(2)]
        t0 = time.perf_counter()
        first = eng.submit(reqs[0])
        second = eng.submit(reqs[1])
        gap = time.perf_counter() - t0  # the second was submitted at most this much later
        m1, m2 = first.result(timeout=60).metrics, second.result(timeout=60).metrics
        # The second left the queue once the first had ended.
        assert m2.queue_s >= m1.total_s - gap
        for m in (m1, m2):
            assert m.tokens_per_s == pytest.approx(12 / (m.total_s - m.queue_s), rel=1e-6)
        t0 = time.perf_counter()
        first_text = None
        for chunk in eng.stream(Request(prompt="hello", max_new_tokens=12, min_new_tokens=12)):
            if first_text is None and chunk.text:
                first_text = time.perf_counter() - t0
            if chunk.done:
                streamed = chunk.response
        wall = time.perf_counter() - t0
    assert first_text is not None and streamed.metrics.ttft_s is not None
    assert streamed.metrics.queue_s <= streamed.metrics.ttft_s <= first_text
    assert streamed.metrics.total_s <= wall


def test_completion_tokens_count_the_stop_string_cut_from_the_text(engine):
    full = engine.generate(Request(prompt="stop here", max_new_tokens=24, min_new_tokens=24))
    stop = full.raw_text[6:9]
    assert len(stop) == 3 and full.raw_text.find(stop) == 6
    cut = engine.generate(Request(prompt="stop here", max_new_tokens=24, stop=[stop]))
    assert cut.finish_reason is FinishReason.STOP and stop not in cut.raw_text
    # The fewest greedy tokens whose text holds the stop string: those were generated.
    made = next(
        n
        for n in range(1, 25)
        if stop in engine.generate(Request(prompt="stop here", max_new_tokens=n)).raw_text
    )
    assert cut.metrics.completion_tokens == made


def test_a_request_cancelled_while_its_prompt_is_prefilled_counts_as_cancelled_before_start(
    tiny_model_path,
):
    """``batch_size`` 0 and ``cancelled_before_start`` cover a request that left the queue
    but was cancelled before its prompt was fully prefilled (here in chunks of 4 tokens,
    about 450 steps, so the cancel comes long before it ends); it was not refused."""
    with Engine.load(str(tiny_model_path), device="cpu", prefill_chunk_tokens=4) as eng:
        req = Request(prompt="word " * 600, max_new_tokens=4)
        future = eng.submit(req)
        deadline = time.monotonic() + 30
        while eng._loop.steps < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert eng.cancel(req.id)
        resp = future.result(timeout=30)
        agg = eng.metrics()
    assert resp.finish_reason is FinishReason.CANCELLED
    assert resp.metrics.batch_size == 0 and resp.metrics.completion_tokens == 0
    assert resp.metrics.prompt_tokens > 4 * 100 and resp.metrics.ttft_s is None
    assert (agg.cancelled_before_start, agg.requests, agg.finish_reasons["cancelled"]) == (1, 0, 0)
    assert agg.rejected == 0


def test_metrics_add_up_over_sixteen_threads_mixing_calls_adapters_and_cancels(
    tiny_model_path, adapter_dir
):
    """A web app's load: 16 threads generating, streaming, sending batches and cancelling,
    on the base model and two adapters. Each thread gets its own request's text (the
    reply it gets alone), and ``metrics()`` accounts for every request exactly once."""
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=6) as eng:
        for name in ("a", "b"):
            eng.adapters.load(str(adapter_dir / name), name=name)
        choices: list[list[str] | None] = [None, ["a"], ["b"], []]

        def request(i: int, n: int = 6) -> Request:
            return Request(
                prompt=f"thread {i} says",
                max_new_tokens=n,
                min_new_tokens=n,
                adapters=choices[i % 4],
            )

        alone = {i: eng.generate(request(i)).text for i in range(16)}
        before = eng.metrics()
        ended: list[Response] = []
        failures: list[BaseException] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            try:
                for rep in range(3):
                    mode, req = (i + rep) % 4, request(i)
                    if mode == 0:
                        resp = eng.generate(req)
                    elif mode == 1:
                        chunks = list(eng.stream(req))
                        resp = chunks[-1].response
                        assert "".join(c.text for c in chunks) == resp.text
                    elif mode == 2:
                        (resp,) = eng.generate_many([req])
                    else:
                        req = request(i, n=400)
                        future = eng.submit(req)
                        time.sleep(0.002 * (i % 5))
                        eng.cancel(req.id)
                        resp = future.result(timeout=60)
                        assert resp.finish_reason is FinishReason.CANCELLED
                    assert resp.id == req.id
                    if mode != 3:
                        assert resp.text == alone[i], (i, mode)
                        assert resp.metrics.adapters == tuple(choices[i % 4] or ())
                    with lock:
                        ended.append(resp)
            except BaseException as exc:  # reported below, in the test's thread
                failures.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread hung"
        assert failures == []
        after = eng.metrics()
    assert len(ended) == 48
    ran = [r for r in ended if r.metrics.batch_size > 0]
    assert after.total_requests - before.total_requests == 48
    # Only cancels ended before running here: cancelled, none refused.
    assert after.cancelled_before_start - before.cancelled_before_start == 48 - len(ran)
    assert after.rejected == before.rejected
    # The window (256) holds every request that ran, the 16 reference ones included.
    assert after.requests == before.requests + len(ran)
    assert after.completion_tokens - before.completion_tokens == sum(
        r.metrics.completion_tokens for r in ran
    )
    assert sum(after.finish_reasons.values()) == after.requests
    assert after.finish_reasons["cancelled"] == sum(
        r.finish_reason is FinishReason.CANCELLED for r in ran
    )
    assert (after.queue_depth, after.running) == (0, 0)


def test_a_training_job_keeps_the_base_models_blocks_as_its_readme_says(tiny_model_path, tmp_path):
    """Was: the job adds its adapter when it starts and saves it when it ends, and each of
    those emptied the whole cache (so README said). Now each says it changed the job's
    adapter only: the base prompt cached before the job is reused after it, unchanged."""
    from mp13_engine import TrainingConfig

    prompt = Request(prompt="the quick brown fox jumps over the lazy dog " * 12, max_new_tokens=2)
    rows = [{"prompt": "Capital of Zorbia?", "completion": " Flumptown."}] * 4
    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        first = eng.generate(prompt)
        assert eng.generate(prompt).metrics.cached_tokens > 0
        blocks = eng.metrics().prefix_cache.blocks
        assert blocks > 0
        config = TrainingConfig(
            adapter="z", dataset=rows, max_steps=2, batch_size=2, output_dir=str(tmp_path)
        )
        assert eng.train(config).result(timeout=300).steps == 2
        assert eng.metrics().prefix_cache.blocks == blocks
        after = eng.generate(prompt)
        assert after.metrics.cached_tokens > 0 and after.raw_text == first.raw_text


def test_cancelled_while_queued_counts_as_cancelled_and_refused_as_rejected(tiny_model_path):
    """Was: a request cancelled while still queued (the REPL's background warm-up, made
    stale by a new system prompt) was counted in ``rejected`` with the ones the engine
    refused, so ``/metrics`` showed refusals where nothing had been refused."""
    with Engine.load(str(tiny_model_path), device="cpu", max_queue=1) as eng:
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            release.wait(30)

        holder = threading.Thread(target=eng._run_on_worker, args=(hold,))
        holder.start()
        try:
            assert entered.wait(30)  # the worker is busy: what is sent now stays queued
            queued = Request(prompt="stale warm-up", max_new_tokens=4)
            future = eng.submit(queued)
            full = eng.generate(Request(prompt="one too many", max_new_tokens=4))
            assert eng.cancel(queued.id)
        finally:
            release.set()
            holder.join(30)
        cancelled = future.result(timeout=30)
        agg = eng.metrics()
    assert cancelled.finish_reason is FinishReason.CANCELLED
    assert cancelled.metrics.batch_size == 0
    assert full.finish_reason is FinishReason.ERROR and "queue" in full.error
    assert (agg.cancelled_before_start, agg.rejected, agg.total_requests) == (1, 1, 2)
    assert agg.requests == 0 and agg.finish_reasons["cancelled"] == 0


def test_the_recorder_tells_cancelled_from_refused_among_requests_that_never_ran():
    rec = MetricsRecorder(window=4)
    never = RequestMetrics(batch_size=0)
    for i, reason in enumerate(
        [FinishReason.CANCELLED, FinishReason.ERROR, FinishReason.CANCELLED]
    ):
        rec.record(0.0, 1.0, Response(id=str(i), finish_reason=reason, metrics=never))
    ran = RequestMetrics(completion_tokens=2, total_s=1.0, batch_size=1)
    rec.record(0.0, 1.0, Response(id="r", finish_reason=FinishReason.CANCELLED, metrics=ran))
    snap = rec.snapshot(0, 0)
    assert (snap.cancelled_before_start, snap.rejected, snap.total_requests) == (2, 1, 4)
    assert snap.requests == 1 and snap.finish_reasons["cancelled"] == 1
