# SPDX-License-Identifier: Apache-2.0
"""The per-request output processor: chunks and the final response come from one state.

Most tests drive a ``RequestState`` as the decode loop does (``start``, ``append``
per token, ``finish``) over a byte-level fake vocabulary, so token boundaries can
fall anywhere, also inside a UTF-8 character or a stop string. The engine-level
tests check the same on a tiny model: one decode call per token over a short
window, and the status of a request through its life.
"""

from __future__ import annotations

import collections
import itertools
import math
import random
import threading
import time

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_engine import FinishReason, Request, toolcalls
from mp13_engine._output import (
    _SLIDE,
    OutputProcessor,
    OutputSetup,
    RequestStatus,
    StopIndex,
    StopMatcher,
)
from mp13_engine._streams import RequestState, RequestStream
from mp13_engine._tool_format import ToolCallFormat
from mp13_engine.testing import TINY_FAMILIES
from mp13_toolbox import ToolCall
from tests.engine.toolcalls._toolcalls_cases import FORMATS, TOOLS, USER_FORMAT, samples


class ByteVocab:
    """A fake byte-level tokenizer: every token is a byte string, cut anywhere."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.calls: list[int] = []  # ids per decode call

    def ids(self, text: str, cuts: list[int] = ()) -> list[int]:
        data = text.encode("utf-8")
        bounds = sorted({0, len(data), *(c for c in cuts if 0 < c < len(data))})
        out = []
        for a, b in itertools.pairwise(bounds):
            self.pieces.append(data[a:b])
            out.append(len(self.pieces) - 1)
        return out

    def tokens(self, *pieces: str) -> list[int]:
        return [i for p in pieces for i in self.ids(p)]

    def decode(self, ids: list[int]) -> str:
        self.calls.append(len(ids))
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


def _state(vocab, fmt=None, watched=True, prompt=None, finished=None, **fields):
    setup = OutputSetup(vocab.decode, ToolCallFormat(fmt), finished)
    req = Request(prompt="p", tools=TOOLS if fmt else None, **fields)
    return RequestState(req, prompt, [1], output=setup, watched=watched)


def _run(st, ids, cancel_at=None):
    """Drive ``st`` as the decode loop would; returns the appends' verdicts."""
    assert st.start()
    verdicts = []
    for n, tok in enumerate(ids):
        if n == cancel_at:
            assert st.cancel()
        ended = st.append(tok)
        verdicts.append(ended)
        if ended:
            st.finish(FinishReason.STOP)
            break
    else:
        st.finish(FinishReason.LENGTH)
    return verdicts


def _chunks(st):
    out = []
    while (c := st.pop_chunk()) is not None:
        out.append(c)
    return out


def _assert_chunks_match(chunks, resp):
    assert [c.done for c in chunks].count(True) == 1 and chunks[-1].done
    assert chunks[-1].response is resp
    assert "".join(c.text for c in chunks) == resp.text
    assert "".join(c.reasoning for c in chunks) == resp.reasoning
    assert [c.tool_call for c in chunks if c.tool_call] == list(resp.tool_calls)


# ----- the property: chunks == response, on every format, for any token split


def _stop_hits(text: str, sizes: list[int], stops: list[str]) -> list[int]:
    """Where stop strings start in the text released up to the first token completing one.

    Text is released token by token; a token that ends inside a character is held back
    whole until a later token completes the character.
    """
    data, end = text.encode("utf-8"), 0
    for size in sizes:
        end += size
        try:
            so_far = data[:end].decode("utf-8")
        except UnicodeDecodeError:  # ends inside a character: nothing released yet
            continue
        hits = [so_far.find(s) for s in stops if s and so_far.find(s) >= 0]
        if hits:
            return hits
    return []


@pytest.fixture(autouse=True)
def _user_format_registered():
    """``FORMATS`` holds a user-registered format too (see tests/engine/toolcalls/conftest.py)."""
    with toolcalls.register_format(USER_FORMAT):
        yield


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_chunks_and_response_agree_for_any_token_split(fmt, data):
    text = data.draw(st.sampled_from(samples(fmt))) + data.draw(st.sampled_from(["", " é世🚀"]))
    cuts = data.draw(st.lists(st.integers(1, len(text.encode()) - 1), max_size=40))
    stops = data.draw(
        st.lists(
            st.one_of(
                st.just("§never§"),
                st.integers(0, len(text) - 1).flatmap(
                    lambda i: st.integers(1, 6).map(lambda n: text[i : i + n])
                ),
            ),
            max_size=2,
        )
    )
    prompt = data.draw(st.sampled_from([None, "user: hi\n"]))
    vocab = ByteVocab()
    ids = vocab.ids(text, cuts)
    watched = _state(vocab, fmt, prompt=prompt, stop=stops)
    verdicts = _run(watched, ids)
    resp = watched.response
    chunks = _chunks(watched)
    _assert_chunks_match(chunks, resp)

    # raw_text is the text cut at the first stop string, found across any token boundary:
    # generation ends at the first token that completes a stop string, and the text is cut
    # where the earliest stop string starts in what was generated up to then
    hits = _stop_hits(text, [len(vocab.pieces[i]) for i in ids], stops)
    cut = min(hits) if hits else len(text)
    assert resp.raw_text == text[:cut]
    assert resp.finish_reason is (FinishReason.STOP if hits else FinishReason.LENGTH)
    assert verdicts[-1] is bool(hits) and not any(verdicts[:-1])
    # and the parsed fields are what parsing the whole raw text gives
    in_reasoning = toolcalls.prompt_opens_reasoning(prompt, fmt) if prompt else None
    whole = toolcalls.parse(resp.raw_text, fmt, tools=TOOLS, in_reasoning=in_reasoning)
    assert (resp.text, resp.reasoning, resp.tool_calls, resp.parse_errors) == (
        whole.content,
        whole.reasoning,
        whole.tool_calls,
        whole.errors,
    )
    # streaming only changes who reads: an unwatched run queues nothing, same response
    unwatched = _state(vocab, fmt, watched=False, prompt=prompt, stop=stops)
    _run(unwatched, ids)
    assert unwatched.pop_chunk() is None
    assert attrs_without_metrics(unwatched.response) == attrs_without_metrics(resp)


def attrs_without_metrics(resp):
    return (resp.text, resp.raw_text, resp.reasoning, resp.tool_calls, resp.parse_errors)


# ----- stop strings


def test_a_stop_string_split_across_tokens_is_found_and_never_streamed():
    vocab = ByteVocab()
    st_ = _state(vocab, stop=["END"])
    assert st_.start()
    assert st_.append(vocab.ids("abc E")[0]) is False
    assert [c.text for c in _chunks(st_)] == ["abc "]  # "E" may start the stop: held back
    assert st_.append(vocab.ids("N")[0]) is False
    assert _chunks(st_) == []
    assert st_.append(vocab.ids("D and more")[0]) is True
    st_.finish(FinishReason.STOP)
    chunks = _chunks(st_)
    assert "".join(c.text for c in chunks) == ""
    assert st_.response.text == st_.response.raw_text == "abc "
    assert st_.response.finish_reason is FinishReason.STOP


def test_held_back_text_is_released_once_it_is_not_a_stop():
    vocab = ByteVocab()
    st_ = _state(vocab, stop=["END", "xyz"])
    assert st_.start()
    st_.append(vocab.ids("abc EN")[0])
    assert [c.text for c in _chunks(st_)] == ["abc "]
    st_.append(vocab.ids("Dless")[0])  # "ENDless": END completed → stop
    st_.finish(FinishReason.STOP)
    assert st_.response.text == "abc "

    st2 = _state(vocab, stop=["END"])
    assert st2.start()
    st2.append(vocab.ids("abc EN")[0])
    st2.append(vocab.ids("Ox")[0])
    assert "".join(c.text for c in _chunks(st2)) == "abc ENOx"
    st2.append(vocab.ids(" E")[0])
    # Cancelled (or cut by length) with a held possible-stop prefix: the prefix is text.
    st2.finish(FinishReason.CANCELLED)
    chunks = _chunks(st2)
    assert "".join(c.text for c in chunks) == " E"
    assert st2.response.text == "abc ENOx E"


def test_the_earliest_stop_string_wins_when_one_token_completes_two():
    vocab = ByteVocab()
    st_ = _state(vocab, stop=["world", "lo w"])
    _run(st_, vocab.tokens("hel", "lo world"))
    assert st_.response.raw_text == "hel"


def test_a_stop_string_after_a_tool_call_keeps_the_call_and_cuts_the_rest():
    vocab = ByteVocab()
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    text = f"Sure.{call}<|STOP|> ignored <tool_call>bad"
    st_ = _state(vocab, "hermes", stop=["<|STOP|>"])
    verdicts = _run(st_, vocab.ids(text, list(range(1, len(text), 3))))
    resp = st_.response
    assert verdicts[-1] is True and resp.finish_reason is FinishReason.STOP
    assert resp.raw_text == f"Sure.{call}"
    assert resp.text == "Sure." and [c.name for c in resp.tool_calls] == ["get_weather"]
    assert resp.parse_errors == ()
    _assert_chunks_match(_chunks(st_), resp)


def test_a_stop_string_inside_a_tool_call_leaves_no_partial_call():
    vocab = ByteVocab()
    text = 'Ok <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    st_ = _state(vocab, "hermes", stop=["Paris"])
    _run(st_, vocab.ids(text, list(range(2, len(text), 5))))
    resp = st_.response
    assert resp.raw_text == text[: text.index("Paris")]
    assert resp.tool_calls == ()
    _assert_chunks_match(_chunks(st_), resp)


class ReferenceStops:
    """What ``StopMatcher`` must do, the slow obvious way: search the whole output so far."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.text = ""
        self.released = 0
        self.hit = False

    def feed(self, delta: str) -> str:
        if self.hit:
            return ""
        self.text += delta
        found = [self.text.find(s) for s in self.stops if s in self.text]
        if found:  # the stop string that starts first ends the output
            self.hit = True
            end = min(found)
        else:  # hold back the longest end of the text that a stop string starts with
            held = max(
                (
                    k
                    for k in range(len(self.text) + 1)
                    if any(s.startswith(self.text[len(self.text) - k :]) for s in self.stops)
                ),
            )
            end = len(self.text) - held
        assert end >= self.released  # released text is never taken back
        out, self.released = self.text[self.released : end], max(self.released, end)
        return out

    def flush(self) -> str:
        if self.hit:
            return ""
        out, self.released = self.text[self.released :], len(self.text)
        return out


_STOP_CHARS = st.sampled_from("ab§é日\n ")
_STOP = st.text(_STOP_CHARS, min_size=1, max_size=5)


@st.composite
def _stop_lists(draw):
    """Stop lists small and large, with overlaps and stops that are prefixes of others."""
    stops = draw(st.lists(_STOP, min_size=1, max_size=draw(st.sampled_from([3, 12, 40]))))
    prefixes = draw(st.lists(st.sampled_from(stops), max_size=3))
    return stops + [p[: draw(st.integers(1, len(p)))] for p in prefixes]


@pytest.mark.parametrize("indexed", [False, True, None], ids=["scan", "index", "auto"])
@settings(max_examples=300, deadline=None)
@given(stops=_stop_lists(), deltas=st.lists(st.text(_STOP_CHARS, max_size=6), max_size=12))
def test_the_stop_matcher_releases_what_a_plain_search_would(indexed, stops, deltas):
    matcher = StopMatcher(tuple(stops), indexed=indexed)
    ref = ReferenceStops(stops)
    for delta in deltas:
        assert matcher.feed(delta) == ref.feed(delta), (stops, deltas)
        assert matcher.hit == ref.hit
    assert matcher.flush() == ref.flush()
    if ref.hit:  # nothing after a stop string is ever released
        assert matcher.feed("ab") == matcher.flush() == ""


def test_ten_thousand_stop_strings_cost_a_token_about_what_ten_do():
    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 12))) + "§"
        for _ in range(10_000)
    ]
    text = "".join(rng.choice("abcdefghij ") for _ in range(4000))
    deltas = [text[i : i + 4] for i in range(0, len(text), 4)]

    def cost(stops):
        best = math.inf
        for _ in range(3):
            matcher = StopMatcher(tuple(stops))
            t = time.process_time()
            released = "".join(matcher.feed(d) for d in deltas) + matcher.flush()
            best = min(best, time.process_time() - t)
            assert released == text and not matcher.hit
        return best

    # Scanning each stop string per token made this about 300 times slower (7 ms a token).
    assert cost(words) < 5 * cost(words[:10]) + 0.01


def test_a_requests_stop_index_is_built_at_submission_and_only_reused_on_the_worker(
    monkeypatch,
):
    """Was: ``RequestState.start`` (the worker, admitting the row) sorted the request's
    stop strings, stalling every row of that step (about 0.2 s at 100,000 stops)."""
    vocab = ByteVocab()
    state = _state(vocab, stop=["zz", "STOP", "halt", "end.", "quit"])

    def no_index_on_the_worker(*args, **kwargs):
        raise AssertionError("start() built a stop index")

    monkeypatch.setattr(StopIndex, "__init__", no_index_on_the_worker)
    verdicts = _run(state, vocab.tokens("say ", "ST", "OP", " more"))
    assert verdicts == [False, False, True]
    resp = state.future.result(timeout=1)
    assert resp.raw_text == "say " and resp.finish_reason is FinishReason.STOP


def test_many_stop_strings_cost_the_submitting_thread_not_the_worker():
    rng = random.Random(1)
    stops = [
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 12))) for _ in range(20_000)
    ]
    setup = OutputSetup(ByteVocab().decode, ToolCallFormat(None))
    req = Request(prompt="p", stop=stops)
    submit = start = math.inf
    for _ in range(3):
        t0 = time.process_time()
        state = RequestState(req, "p", [1], output=setup)
        t1 = time.process_time()
        assert state.start()
        t2 = time.process_time()
        submit, start = min(submit, t1 - t0), min(start, t2 - t1)
    # Sorting in start() made it cost about 2000 times what making the state did.
    assert start < submit / 5 + 0.001


def test_characters_split_across_tokens_are_never_streamed_half():
    vocab = ByteVocab()
    text = "é世🚀 ok"
    data = text.encode()
    st_ = _state(vocab)
    _run(st_, vocab.ids(text, list(range(1, len(data)))))  # one byte per token
    chunks = _chunks(st_)
    assert all("\ufffd" not in c.text for c in chunks)
    assert "".join(c.text for c in chunks) == st_.response.text == text


@pytest.mark.parametrize(
    ("fmt", "when"),
    [("hermes", "feed"), ("hermes", "close"), ("hermes", "finish"), ("mistral", "close")],
)
def test_a_failing_parser_keeps_the_output_as_text(monkeypatch, fmt, when):
    """A parser bug, while streaming or at the end, costs the parse, never the output: the
    text it held back (hermes holds leading text until it knows whether it was reasoning;
    mistral holds nothing here) comes out as content. It used to be lost: a failure at the
    end gave ''."""
    vocab = ByteVocab()
    st_ = _state(vocab, fmt)
    assert st_.start()
    run = toolcalls.StreamParser._run

    def boom(self, final):
        if when == ("close" if final else "feed"):
            raise ValueError("parser bug")
        run(self, final)

    def finish_boom(self):
        raise ValueError("parser bug")

    st_.append(vocab.ids("Hello ")[0])
    if when == "finish":
        monkeypatch.setattr(toolcalls.StreamParser, "finish", finish_boom)
    else:
        monkeypatch.setattr(toolcalls.StreamParser, "_run", boom)
    st_.append(vocab.ids("world")[0])
    st_.finish(FinishReason.LENGTH)
    resp = st_.response
    assert resp.finish_reason is FinishReason.LENGTH and resp.error is None
    assert resp.raw_text == resp.text == "Hello world"
    assert resp.parse_errors == (
        "tool-call parsing failed (ValueError: parser bug); the rest of the output is kept as text",
    )
    _assert_chunks_match(_chunks(st_), resp)


def test_a_request_whose_output_cannot_be_built_still_resolves_and_says_why(monkeypatch, caplog):
    """The tokenizer failing at the end, and then the metrics hook failing too, never leave
    a request unresolved: it ends as an ERROR naming what failed, streamed and returned."""

    def metrics_hook(submit_t, end_t, response):
        raise RuntimeError("metrics down")

    vocab = ByteVocab()
    st_ = _state(vocab, finished=metrics_hook)
    assert st_.start()
    st_.append(vocab.ids("Hi")[0])

    def broken(self, out):
        raise ValueError("tokenizer gone")

    monkeypatch.setattr(OutputProcessor, "close", broken)
    assert st_.finish(FinishReason.LENGTH)
    resp = st_.future.result(timeout=1)
    assert (resp.finish_reason, resp.error) == (
        FinishReason.ERROR,
        "decoding the output failed: ValueError: tokenizer gone",
    )
    assert resp.metrics.completion_tokens == 1 and resp.raw_text == ""
    assert _chunks(st_)[-1].response is resp
    assert "on_finish failed" in caplog.text and "building the output" in caplog.text


def test_ctrl_c_while_iterating_a_stream_cancels_its_request(monkeypatch):
    vocab = ByteVocab()
    st_ = _state(vocab)
    assert st_.start()
    cancelled = []
    stream = RequestStream(st_, cancelled.append)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(RequestState, "next_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(stream)
    assert cancelled == [st_.id]
    with pytest.raises(StopIteration):  # the stream is over
        next(stream)
    with pytest.raises(ValueError, match="watched=True"):
        RequestStream(_state(vocab, watched=False), cancelled.append)


def test_ctrl_c_inside_the_parser_is_the_users_not_a_parse_error(monkeypatch):
    vocab = ByteVocab()
    st_ = _state(vocab, "hermes")
    assert st_.start()

    def interrupt(self, delta):
        raise KeyboardInterrupt

    monkeypatch.setattr(toolcalls.StreamParser, "feed", interrupt)
    (hi,) = vocab.ids("Hi")
    with pytest.raises(KeyboardInterrupt):
        st_.append(hi)
    assert st_.tokens == [hi] and st_.response is None


# ----- the status of a request


def test_status_map_covers_every_finish_reason_both_ways():
    for reason in FinishReason:
        status = RequestStatus.ended(reason)
        assert status.finished and status.finish_reason is reason
    alive = [RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.CANCELLING]
    assert all(not s.finished and s.finish_reason is None for s in alive)
    assert alive == sorted(alive) and max(alive) < min(s for s in RequestStatus if s.finished)


def test_status_transitions_of_a_request_that_runs_to_its_end():
    vocab = ByteVocab()
    seen = []
    st_ = _state(vocab, finished=lambda *a: seen.append(st_.status))
    assert st_.status is RequestStatus.WAITING
    with pytest.raises(RuntimeError, match="before start"):
        st_.append(vocab.ids("x")[0])
    assert st_.start() and st_.status is RequestStatus.RUNNING
    assert st_.append(vocab.ids("x")[0]) is False
    assert st_.finish(FinishReason.LENGTH) is True
    assert st_.status is RequestStatus.FINISHED_LENGTH and seen == [st_.status]
    assert st_.finish(FinishReason.ERROR, error="late") is False  # idempotent: first wins
    assert st_.cancel() is False and st_.start() is False
    assert st_.append(vocab.ids("y")[0]) is True  # resolved elsewhere: end the row
    assert st_.response.finish_reason is FinishReason.LENGTH and st_.response.text == "x"
    assert seen == [RequestStatus.FINISHED_LENGTH]  # metrics saw it once


def test_status_transitions_of_cancelled_requests():
    vocab = ByteVocab()
    queued = _state(vocab)
    assert queued.cancel() and queued.status is RequestStatus.CANCELLING
    assert queued.start() is False  # the worker admits nothing cancelled; it resolves it
    assert queued.status is RequestStatus.FINISHED_CANCELLED
    assert queued.future.result(0).metrics.ttft_s is None

    running = _state(vocab)
    verdicts = _run(running, vocab.tokens("a", "b", "c", "d"), cancel_at=2)
    assert verdicts == [False, False, True]  # the worker ends it at its next step
    resp = running.response
    assert resp.finish_reason is FinishReason.CANCELLED  # finish(STOP) after a cancel
    assert resp.text == "ab" and resp.metrics.completion_tokens == 2

    failing = _state(vocab)
    assert failing.start() and failing.cancel()
    failing.finish(FinishReason.ERROR, error="oom")
    assert failing.status is RequestStatus.FINISHED_ERROR  # an error is still reported


# ----- engine level


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from mp13_engine import Engine

    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=4) as eng:
        yield eng


def test_a_streamed_request_decodes_each_token_once(engine):
    tok = engine._state.tokens.tokenizer
    real = tok.decode
    sizes: list[int] = []

    def counting(ids, *args, **kwargs):
        sizes.append(len(ids))
        return real(ids, *args, **kwargs)

    n = 60
    tok.decode = counting
    try:
        chunks = list(
            engine.stream(Request(prompt="decode once", max_new_tokens=n, min_new_tokens=n))
        )
    finally:
        del tok.decode
    resp = chunks[-1].response
    assert resp.metrics.completion_tokens == n
    assert "".join(c.text for c in chunks) == resp.text
    # one call per token, plus a slide of the window now and then and the final flush
    assert len(sizes) <= n + n // (_SLIDE - 6) + 1
    assert max(sizes) <= _SLIDE + 16  # never the whole output again
    assert (
        resp.raw_text == engine.generate(Request(prompt="decode once", max_new_tokens=n)).raw_text
    )


# ----- cancel races: every request resolves exactly once, with its partial text

LONG = 1500


def _counting_finishes(engine):
    """Count the resolutions per request id (and the thread of each) through the metrics hook."""
    seen: dict[str, list[threading.Thread]] = collections.defaultdict(list)
    original = engine._output

    def on_finish(submit_t, end_t, response):
        seen[response.id].append(threading.current_thread())
        original.on_finish(submit_t, end_t, response)

    engine._output = attrs.evolve(original, on_finish=on_finish)
    return seen, original


def _race_once(vocab, ids, close_at, cancel_at):
    """The worker appends ``ids`` while close (finish) and a canceller race it, each
    starting once the worker produced that many tokens (or ended)."""
    seen = []
    st_ = _state(vocab, finished=lambda *a: seen.append(a[2]), stop=["§"])
    assert st_.start()
    wins = []
    errors = []

    def worker():
        try:
            for tok in ids:
                time.sleep(0)  # a decode step: let the others run
                if st_.append(tok):
                    wins.append(st_.finish(FinishReason.STOP))
                    return
            wins.append(st_.finish(FinishReason.LENGTH))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def after(n):
        while len(st_.tokens) < n and not st_.done:
            time.sleep(0)

    def closer():
        after(close_at)
        wins.append(st_.finish(FinishReason.CANCELLED))

    def canceller():
        after(cancel_at)
        st_.cancel()

    threads = [threading.Thread(target=f) for f in (worker, closer, canceller)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and wins.count(True) == 1 and len(seen) == 1
    return st_, seen[0]


def test_racing_finishes_on_one_state_resolve_it_once():
    vocab = ByteVocab()
    words = [f"w{i} " for i in range(100)]
    ids = vocab.tokens(*words)
    rng = random.Random(1)
    reasons = collections.Counter()
    for _ in range(100):
        at = [rng.randint(0, len(ids) + 20) for _ in range(2)]
        st_, recorded = _race_once(vocab, ids, *at)
        resp = st_.future.result(0)
        assert resp is recorded is st_.response
        assert "".join(words).startswith(resp.raw_text)
        _assert_chunks_match(_chunks(st_), resp)
        midway = 0 < len(resp.raw_text) < len("".join(words))
        reasons[resp.finish_reason, midway] += 1
    # the races went every way: cancelled midway (partial text kept), and the row ending first
    assert reasons[FinishReason.CANCELLED, True] > 0 and reasons[FinishReason.LENGTH, False] > 0


def test_cancelling_streams_from_other_threads_many_times(engine):
    rng = random.Random(0)
    prompts = [f"race {i}" for i in range(6)]
    lengths = [rng.randint(1, 40) for _ in prompts]
    alone = engine.generate_many(
        [Request(prompt=p, max_new_tokens=n) for p, n in zip(prompts, lengths, strict=True)]
    )
    full = {p: r.raw_text for p, r in zip(prompts, alone, strict=True)}
    ends = {p: r.finish_reason for p, r in zip(prompts, alone, strict=True)}
    seen, original = _counting_finishes(engine)
    try:
        for round_ in range(6):
            reqs = [
                Request(prompt=p, max_new_tokens=n) for p, n in zip(prompts, lengths, strict=True)
            ]
            streams = [engine.stream(r) for r in reqs]
            said: dict[str, list[bool]] = collections.defaultdict(list)

            def canceller(seed, reqs=reqs, said=said):
                local = random.Random(seed)
                for r in local.sample(reqs, len(reqs)):
                    time.sleep(local.random() * 0.01)
                    said[r.id].append(engine.cancel(r.id))

            threads = [threading.Thread(target=canceller, args=(round_ * 2 + k,)) for k in (0, 1)]
            for t in threads:
                t.start()
            for req, stream in zip(reqs, streams, strict=True):
                chunks = list(stream)
                resp = chunks[-1].response
                _assert_chunks_match(chunks, resp)
                assert full[req.prompt].startswith(resp.raw_text)  # its partial text
                if resp.finish_reason is not FinishReason.CANCELLED:
                    assert resp.raw_text == full[req.prompt]
            for t in threads:
                t.join()
            for req, stream in zip(reqs, streams, strict=True):
                if any(said[req.id]):  # a cancel that said True always wins
                    assert stream.response.finish_reason is FinishReason.CANCELLED
                else:
                    assert stream.response.finish_reason is ends[req.prompt]
    finally:
        engine._output = original
    assert len(seen) == 36 and all(len(v) == 1 for v in seen.values())


def test_the_canceller_resolves_a_cancel_at_once_and_the_loop_drops_the_row(tiny_model_path):
    from mp13_engine import Engine

    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1) as eng:
        seen, _ = _counting_finishes(eng)
        running = Request(prompt="busy", max_new_tokens=LONG, min_new_tokens=LONG)
        f_run = eng.submit(running)
        state = eng._inflight[running.id]
        _wait(lambda: len(state.tokens) >= 2)
        queued = Request(prompt="waiting", max_new_tokens=5)
        f_q = eng.submit(queued)
        assert eng._inflight[queued.id].status is RequestStatus.WAITING
        assert eng.cancel(queued.id) is True
        assert f_q.done() and seen[queued.id] == [threading.current_thread()]
        assert eng.cancel(running.id) is True
        # Resolved by the time cancel returns, without waiting for the step in progress
        # (the loop may have resolved it first, in the instant between the two).
        assert state.status is RequestStatus.FINISHED_CANCELLED
        resp = f_run.result(timeout=30)
        assert resp.finish_reason is FinishReason.CANCELLED and resp.raw_text
        assert len(seen[running.id]) == 1
        assert eng.cancel(running.id) is False
        _wait(lambda: eng._loop.kv.rows == 0)  # the loop dropped the row at its next step


class _Stalling:
    """Wraps a model; its third forward stops until ``release`` is set."""

    def __init__(self, model):
        self._model = model
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._steps = 0

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, **kwargs):
        self._steps += 1
        if self._steps == 3:
            self.stalled.set()
            self.release.wait(30)
        return self._model(**kwargs)


def test_close_resolves_a_row_the_worker_cannot_reach_in_time(tiny_model_path):
    from mp13_engine import Engine

    eng = Engine.load(str(tiny_model_path), device="cpu")
    seen, _ = _counting_finishes(eng)
    stalling = _Stalling(eng.model)

    def install():
        eng._state.model = stalling

    eng._run_on_worker(install)
    req = Request(prompt="stuck", max_new_tokens=LONG, min_new_tokens=LONG)
    fut = eng.submit(req)
    state = eng._inflight[req.id]
    assert stalling.stalled.wait(30)
    tokens = len(state.tokens)
    eng.close(timeout=0.2)
    resp = fut.result(timeout=0)  # resolved by close itself, the worker is still stuck
    assert resp.finish_reason is FinishReason.CANCELLED
    assert resp.metrics.completion_tokens == tokens and resp.raw_text
    assert seen[req.id] == [threading.current_thread()]
    stalling.release.set()
    eng._worker._thread.join(30)
    assert not eng._worker._thread.is_alive()
    assert seen[req.id] == [threading.current_thread()]  # the worker's finish was a no-op


def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.0005)


def test_cancelling_the_future_of_submit_cancels_the_request(engine):
    long = Request(prompt="future cancel", max_new_tokens=LONG, min_new_tokens=LONG)
    beside = Request(prompt="beside it", max_new_tokens=30, min_new_tokens=30)
    alone = engine.generate(Request(prompt="beside it", max_new_tokens=30, min_new_tokens=30))
    futures = [engine.submit(long), engine.submit(beside)]
    state = engine._inflight[long.id]
    _wait(lambda: len(state.tokens) >= 2)
    assert futures[0].cancel()
    _wait(lambda: state.done)  # the worker ended the row at its next step
    assert state.response.finish_reason is FinishReason.CANCELLED
    assert state.response.metrics.completion_tokens < LONG
    other = futures[1].result(timeout=60)
    assert other.finish_reason is FinishReason.LENGTH and other.raw_text == alone.raw_text
    assert engine.generate("still serving", max_new_tokens=2).ok


def test_cancelling_the_future_of_a_queued_request_frees_its_place_in_the_queue(
    tiny_model_path,
):
    """Was: the cancelled request stayed queued until a row freed up, so a full queue
    still refused new requests ("the queue is full") after the user cancelled its futures."""
    from mp13_engine import Engine

    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1, max_queue=2) as eng:
        busy_req = Request(prompt="busy", max_new_tokens=LONG, min_new_tokens=LONG)
        busy = eng.submit(busy_req)
        _wait(lambda: eng.metrics().running == 1)
        queued = [Request(prompt=f"q{i}", max_new_tokens=2) for i in range(2)]
        futures = [eng.submit(r) for r in queued]
        states = [eng._inflight[r.id] for r in queued]
        assert eng.metrics().queue_depth == 2
        assert all(f.cancel() for f in futures)
        # Resolved before cancel() returned, as cancel(id) does, and out of the queue.
        assert [s.response.finish_reason for s in states] == [FinishReason.CANCELLED] * 2
        assert eng.metrics().queue_depth == 0
        assert eng.cancel(queued[0].id) is False
        late = eng.submit(Request(prompt="now it fits", max_new_tokens=2))
        assert eng.metrics().queue_depth == 1 and not late.done()  # queued, not refused
        assert eng.cancel(busy_req.id)
        assert busy.result(60).finish_reason is FinishReason.CANCELLED
        assert late.result(60).ok


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_real_tokenizers_stream_the_calls_the_response_holds(tiny_model_factory, family):
    """Each family's tokenizer and format: the wire text of a call (its markup often special
    tokens), decoded token by token, gives the call in the stream and in the response."""
    from mp13_engine import Engine

    call = ToolCall("get_weather", {"city": "Paris"})
    with Engine.load(str(tiny_model_factory(family)), device="cpu") as eng:
        fmt = eng.tool_format
        wire = "Let me see. " + toolcalls.render_calls([call], fmt)
        req = Request(messages=[{"role": "user", "content": "weather?"}], tools=TOOLS)
        prompt = eng.format_prompt(req)
        for stop in ((), ("<<end>>",)):
            st_ = RequestState(
                attrs.evolve(req, stop=stop), prompt, [1], output=eng._output, watched=True
            )
            _run(st_, eng._state.tokens.encode(wire + "<<end>> tail"))
            resp = st_.response
            _assert_chunks_match(_chunks(st_), resp)
            expected = wire + ("" if stop else "<<end>> tail")
            assert resp.raw_text == expected
            in_reasoning = toolcalls.prompt_opens_reasoning(prompt, fmt)
            whole = toolcalls.parse(expected, fmt, tools=TOOLS, in_reasoning=in_reasoning)
            assert resp.tool_calls == whole.tool_calls
            assert [(c.name, c.arguments) for c in resp.tool_calls] == [(call.name, call.arguments)]
