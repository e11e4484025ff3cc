# SPDX-License-Identifier: Apache-2.0
"""Generation behaviour: waves, per-row parameters, finish reasons, prompts, failures.

Outputs of a random tiny model are meaningless; these tests compare the
engine with itself (alone vs in a wave, sync vs async) and check ids,
lengths, finish reasons and errors, never the text.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading

import pytest

from mp13_engine import Engine, FinishReason, Request, RequestError


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=8) as eng:
        yield eng


def _prompts(n: int) -> list[Request]:
    words = ["apple", "river", "cloud nine", "x", "seven seas sail", "mp13", "é ü 世界", "ok ok"]
    return [
        Request(messages=[{"role": "user", "content": words[i % len(words)] * (i + 1)}])
        for i in range(n)
    ]


def _fresh(req: Request, **changes) -> Request:
    return Request(
        messages=req.messages,
        **{k: getattr(req, k) for k in ("max_new_tokens", "do_sample", "seed", "top_k", "top_p")}
        | changes,
    )


def test_greedy_alone_equals_in_a_wave_of_8(engine):
    reqs = [_fresh(r, max_new_tokens=6 + 2 * i) for i, r in enumerate(_prompts(8))]
    solo = [engine.generate(_fresh(r)) for r in reqs]
    wave = engine.generate_many([_fresh(r) for r in reqs])
    assert [w.metrics.batch_size for w in wave] == [8] * 8
    assert [s.metrics.batch_size for s in solo] == [1] * 8
    for s, w, r in zip(solo, wave, reqs, strict=True):
        assert w.raw_text == s.raw_text
        assert w.metrics.completion_tokens == s.metrics.completion_tokens <= r.max_new_tokens
        assert w.finish_reason is s.finish_reason


def test_seeded_sampling_reproducible_alone_and_in_a_wave(engine):
    reqs = [
        _fresh(r, max_new_tokens=12, do_sample=True, seed=100 + i, top_k=40, top_p=0.9)
        for i, r in enumerate(_prompts(4))
    ]
    solo_a = [engine.generate(_fresh(r)) for r in reqs]
    solo_b = [engine.generate(_fresh(r)) for r in reqs]
    # a wave mixing greedy and sampled rows
    mixed = [_fresh(r) for r in reqs] + [_fresh(r, max_new_tokens=12) for r in _prompts(4)]
    wave = engine.generate_many(mixed)
    assert [a.raw_text for a in solo_a] == [b.raw_text for b in solo_b]
    assert [w.raw_text for w in wave[:4]] == [a.raw_text for a in solo_a]
    # different seeds give different samples (overwhelmingly likely over 12 tokens)
    other = engine.generate(_fresh(reqs[0], seed=999))
    assert other.raw_text != solo_a[0].raw_text
    # no seed: each request draws its own, so two runs of one request differ
    unseeded = [engine.generate(_fresh(reqs[0], seed=None)) for _ in range(2)]
    assert unseeded[0].raw_text != unseeded[1].raw_text


def test_sync_async_parity_including_inside_a_running_loop(engine):
    reqs = _prompts(3)
    sync = [engine.generate(_fresh(r, max_new_tokens=7)) for r in reqs]

    async def main():
        one = [await engine.agenerate(_fresh(r, max_new_tokens=7)) for r in reqs]
        many = await engine.agenerate_many([_fresh(r, max_new_tokens=7) for r in reqs])
        # a blocking call from inside a running loop (notebook style) also works
        blocking = engine.generate(_fresh(reqs[0], max_new_tokens=7))
        return one, many, blocking

    one, many, blocking = asyncio.run(main())
    for group in (one, many):
        assert [r.raw_text for r in group] == [r.raw_text for r in sync]
        assert [r.finish_reason for r in group] == [r.finish_reason for r in sync]
    assert blocking.raw_text == sync[0].raw_text


def test_sync_calls_from_many_threads_share_waves(engine):
    reqs = _prompts(8)
    expected = [engine.generate(_fresh(r, max_new_tokens=5)).raw_text for r in reqs]
    results: dict[int, object] = {}
    barrier = threading.Barrier(8)

    def worker(i):
        barrier.wait()
        results[i] = engine.generate(_fresh(reqs[i], max_new_tokens=5))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i].raw_text for i in range(8)] == expected
    assert max(results[i].metrics.batch_size for i in range(8)) > 1


def test_length_and_min_new_tokens(engine):
    r = engine.generate("count", max_new_tokens=5, min_new_tokens=5)
    assert r.finish_reason is FinishReason.LENGTH
    assert r.metrics.completion_tokens == 5


def test_stop_string_is_removed_and_finishes_stop(engine):
    base = engine.generate(Request(prompt="stop test", max_new_tokens=24))
    text = base.raw_text
    # pick a stop string from the model's own greedy output, at its first occurrence
    cut = next(
        i
        for i in range(2, len(text) - 2)
        if "\ufffd" not in text[i : i + 2] and text.find(text[i : i + 2]) == i
    )
    stop = text[cut : cut + 2]
    r = engine.generate(Request(prompt="stop test", max_new_tokens=24, stop=[stop, "never§"]))
    assert r.finish_reason is FinishReason.STOP
    assert r.raw_text == text[:cut]
    assert stop not in r.text
    chunks = list(engine.stream(Request(prompt="stop test", max_new_tokens=24, stop=[stop])))
    assert "".join(c.text for c in chunks) == r.text


@pytest.fixture(scope="module")
def eos_model(tiny_model_path, tmp_path_factory):
    """A copy of the tiny model whose EOS set includes the first greedy token of 'eos test'."""
    import torch

    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        prompt = eng.format_prompt(Request(prompt="eos test"))
        ids = eng.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            first = int(eng.model(ids).logits[0, -1].argmax())
    dest = tmp_path_factory.mktemp("eos") / "model"
    shutil.copytree(tiny_model_path, dest)
    gen_path = dest / "generation_config.json"
    gen = json.loads(gen_path.read_text())
    eos = gen.get("eos_token_id")
    eos = eos if isinstance(eos, list) else [eos]
    gen["eos_token_id"] = [*eos, first]
    gen_path.write_text(json.dumps(gen))
    return dest


def test_eos_finishes_stop_and_min_new_tokens_suppresses_it(eos_model):
    path = eos_model
    with Engine.load(str(path), device="cpu") as eng:
        r = eng.generate(Request(prompt="eos test", max_new_tokens=10))
        assert r.finish_reason is FinishReason.STOP
        assert r.metrics.completion_tokens == 0
        forced = eng.generate(Request(prompt="eos test", max_new_tokens=6, min_new_tokens=6))
        assert forced.finish_reason is FinishReason.LENGTH
        assert forced.metrics.completion_tokens == 6
        # in a wave: the EOS row stops, the forced row goes on
        a, b = eng.generate_many(
            [
                Request(prompt="eos test", max_new_tokens=6),
                Request(prompt="eos test", max_new_tokens=6, min_new_tokens=6),
            ]
        )
        assert (a.finish_reason, b.finish_reason) == (FinishReason.STOP, FinishReason.LENGTH)
        assert b.raw_text == forced.raw_text


def test_return_prompt_format_prompt_and_count_tokens_agree(engine):
    req = Request(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_new_tokens=2,
        return_prompt=True,
    )
    r = engine.generate(req)
    assert r.prompt == engine.format_prompt(req)
    assert r.metrics.prompt_tokens == engine.count_tokens(r.prompt)
    plain = engine.generate(Request(messages=req.messages, max_new_tokens=2))
    assert plain.prompt is None


def test_continue_final_continues_the_assistant_message(engine):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello the"}]
    prompt = engine.format_prompt(Request(messages=msgs, continue_final=True))
    assert prompt.endswith("Hello the")
    open_prompt = engine.format_prompt(Request(messages=msgs[:1]))
    assert prompt.startswith(open_prompt)
    r = engine.generate(
        Request(messages=msgs, continue_final=True, max_new_tokens=3, min_new_tokens=3)
    )
    assert r.ok and r.metrics.completion_tokens == 3
    # Checked where the request is built (was: an ERROR response from generate).
    with pytest.raises(RequestError, match="assistant") as err:
        Request(messages=msgs[:1], continue_final=True, max_new_tokens=3)
    assert err.value.field == "continue_final"


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"top_p": 0.0, "do_sample": True}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": -0.5}, "temperature"),
        ({"top_k": -1}, "top_k"),
    ],
)
def test_bad_field_values_raise_where_the_request_is_built(engine, fields, needle):
    # Field values are checked when the Request is built (was: an ERROR response).
    with pytest.raises(RequestError, match=needle):
        Request(prompt="hi", **fields)
    with pytest.raises(RequestError, match=needle):
        engine.generate("hi", **fields)
    assert engine.generate("still fine?", max_new_tokens=2).ok


def test_unknown_adapter_resolves_error_and_engine_keeps_serving(engine):
    r = engine.generate(Request(prompt="hi", adapters=["no-such-adapter"]))
    assert r.finish_reason is FinishReason.ERROR
    assert "no-such-adapter" in r.error
    assert engine.generate("still fine?", max_new_tokens=2).ok


def test_prompt_longer_than_context_window_errors(engine):
    ctx = engine.model.config.max_position_embeddings
    r = engine.generate(Request(prompt="word " * (ctx + 10), max_new_tokens=2))
    assert r.finish_reason is FinishReason.ERROR
    assert "context window" in r.error


def test_a_reply_that_would_run_past_the_context_window_ends_length_at_its_edge(engine):
    ctx = engine.model.config.max_position_embeddings
    words = ctx - 8
    while engine.count_tokens("w " * words) < ctx - 5:  # the exact count is the tokenizer's
        words += 1
    prompt = "w " * words
    left = ctx - engine.count_tokens(prompt)
    assert 0 < left <= 5
    long = Request(prompt=prompt, max_new_tokens=50, min_new_tokens=50)
    too_long = Request(prompt="w " * (ctx + 10), max_new_tokens=2)
    out = engine.generate_many([Request(prompt="one two", max_new_tokens=3), too_long, long])
    assert out[0].finish_reason is FinishReason.LENGTH and out[0].metrics.completion_tokens == 3
    assert out[1].finish_reason is FinishReason.ERROR
    assert out[1].error.endswith(f"context window is {ctx}; shorten the prompt or the conversation")
    # Not truncated, and no index error: the reply stops where the window ends.
    assert out[2].finish_reason is FinishReason.LENGTH
    assert out[2].metrics.completion_tokens == left


def test_encoding_a_prompt_past_the_tokenizers_maximum_warns_nothing(tiny_model_path):
    """transformers warned "Token indices sequence length is longer than the specified maximum
    ... will result in indexing errors" though the engine checks the length itself and ends
    such a prompt with its own clear error."""
    import logging

    from transformers import AutoTokenizer

    from mp13_engine._markup import Prompt
    from mp13_engine._state import TokenizerGuard

    class Records(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    seen = Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(seen)
    try:
        tok = AutoTokenizer.from_pretrained(tiny_model_path)
        tok.model_max_length = 8
        guard = TokenizerGuard(tok)
        text = "word " * 40
        assert len(guard.encode(text)) == len(guard.encode_offsets(text)[0]) > 8
        assert len(guard.encode_prompt(Prompt(text))) > 8
        assert not [m for m in seen.messages if "indexing errors" in m]
        tok(text)  # transformers' own call still warns: the check above can fail
        assert [m for m in seen.messages if "indexing errors" in m]
    finally:
        logger.removeHandler(seen)


class _Exploding:
    """Wraps a model; its forward raises when the batch's input holds the marker token."""

    def __init__(self, model, marker):
        self._model = model
        self._marker = marker
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, **kwargs):
        self.calls += 1
        if (kwargs["input_ids"] == self._marker).any():
            raise RuntimeError("boom inside the model")
        return self._model(**kwargs)


def test_exception_in_the_model_fails_only_the_bad_row(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        marker = eng.tokenizer("zzqx", add_special_tokens=False)["input_ids"][0]
        good = [Request(prompt=f"good {i}", max_new_tokens=4) for i in range(3)]
        expected = [eng.generate(Request(prompt=r.prompt, max_new_tokens=4)) for r in good]
        real = eng.model

        def install():
            eng._state.model = _Exploding(real, marker)

        eng._run_on_worker(install)
        out = eng.generate_many([Request(prompt="zzqx bad", max_new_tokens=4), *good])
        assert out[0].finish_reason is FinishReason.ERROR
        assert "boom inside the model" in out[0].error
        assert [o.raw_text for o in out[1:]] == [e.raw_text for e in expected]
        assert all(o.finish_reason is FinishReason.LENGTH for o in out[1:])
        assert eng.generate(Request(prompt="after", max_new_tokens=2)).ok


def test_duplicate_in_flight_id_is_rejected(engine):
    first = engine.stream(Request(id="dup", prompt="a", max_new_tokens=200))
    second = engine.generate(Request(id="dup", prompt="b", max_new_tokens=2))
    assert second.finish_reason is FinishReason.ERROR and "already in flight" in second.error
    # Was only "use a new id": the advice now shows how, and following it works.
    assert "engine.submit(request, id=None)" in second.error
    again = engine.generate(Request(id="dup", prompt="b", max_new_tokens=2), id=None)
    assert again.ok and again.id != "dup"
    first.close()


def test_two_engines_are_independent(tiny_model_factory):
    a_path = tiny_model_factory("chatml")
    b_path = tiny_model_factory("llama3")
    with (
        Engine.load(str(a_path), device="cpu") as a,
        Engine.load(str(b_path), device="cpu") as b,
    ):
        exp_a = [a.generate(f"q{i}", max_new_tokens=5).raw_text for i in range(3)]
        exp_b = [b.generate(f"q{i}", max_new_tokens=5).raw_text for i in range(3)]
        futs = []
        for i in range(3):
            futs.append(a.submit(f"q{i}", max_new_tokens=5))
            futs.append(b.submit(f"q{i}", max_new_tokens=5))
        got = [f.result(timeout=60).raw_text for f in futs]
        assert got[0::2] == exp_a
        assert got[1::2] == exp_b
        a.close()
        assert b.generate("q0", max_new_tokens=5).raw_text == exp_b[0]


@pytest.mark.skipif(
    __import__("sys").platform == "win32", reason="os.kill(SIGINT) ends the process on Windows"
)
@pytest.mark.parametrize("many", [False, True], ids=["generate", "generate_many"])
def test_ctrl_c_during_a_sync_call_cancels_its_requests_and_the_engine_serves_on(
    tiny_model_path, many
):
    import os
    import signal
    import time

    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        sent = [
            Request(prompt=f"long {i}", max_new_tokens=2000, min_new_tokens=2000)
            for i in range(3 if many else 1)
        ]

        def press_ctrl_c() -> None:
            # Only once every request decodes: it has far to go, so the main thread is
            # still waiting in the call when the interrupt lands.
            deadline = time.monotonic() + 30
            while not all((st := eng._inflight.get(r.id)) is not None and st.tokens for r in sent):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.005)
            # A real SIGINT, as a terminal's Ctrl+C sends (interrupt_main() only lands once
            # the main thread runs Python again, i.e. after the wait).
            os.kill(os.getpid(), signal.SIGINT)

        presser = threading.Thread(target=press_ctrl_c)
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            if many:
                eng.generate_many(sent)
            else:
                eng.generate(sent[0])
        presser.join()
        # Its requests were cancelled (not left decoding 2000 tokens each) ...
        assert not eng._inflight and eng.metrics().finish_reasons["cancelled"] == len(sent)
        # ... and the engine answers the next call as before.
        assert eng.generate(Request(prompt="after", max_new_tokens=3)).ok


@pytest.mark.parametrize("fields", [{"top_k": 1}, {"top_p": 1e-6}, {"temperature": 1e-4}])
def test_degenerate_sampling_equals_greedy(engine, fields):
    reqs = _prompts(3)
    greedy = engine.generate_many([_fresh(r, max_new_tokens=10) for r in reqs])
    sampled = engine.generate_many(
        [_fresh(r, max_new_tokens=10, do_sample=True, seed=i, **fields) for i, r in enumerate(reqs)]
    )
    assert [s.raw_text for s in sampled] == [g.raw_text for g in greedy]
