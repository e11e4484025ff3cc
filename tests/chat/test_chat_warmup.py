# SPDX-License-Identifier: MIT
"""The REPL computes the conversation's fixed start into the prefix cache at start.

Was: the first reply of a session computed the system prompt and the builtin tools'
descriptions (about 500 tokens, 2-3 s on SmolLM2 on a CPU) before its first token;
only later turns took them from the prefix cache. Each test loads its own tiny engine:
the prefix cache must start empty for ``cached_tokens`` to say where it came from.
"""

from __future__ import annotations

import asyncio

import pytest

from mp13_context.testing import FakeEngine
from mp13chat._logs import LibraryLog
from mp13chat._warmup import PLACEHOLDER

pytest.importorskip("torch")

QUESTION = "what is the capital of France?"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from mp13_engine.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", family="chatml", seed=0)


@pytest.fixture
def load(tiny_path):
    from mp13_engine import Engine

    engines = []

    def make(**fields):
        engine = Engine.load(str(tiny_path), device="cpu", dtype="float32", **fields)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def shared_prefix_blocks(engine, cursor) -> int:
    """Tokens the prefix cache can hold of what the warm-up and QUESTION share: the
    prompts' common start (system prompt + tools), in whole blocks."""
    tok = engine.tokenizer
    warm = tok.encode(cursor.prompt(PLACEHOLDER), add_special_tokens=False)
    real = tok.encode(cursor.prompt(QUESTION), add_special_tokens=False)
    common = next(i for i, (a, b) in enumerate(zip(warm, real, strict=False)) if a != b)
    block = engine.metrics().prefix_cache.block_tokens
    return common // block * block


def first_reply(h):
    return next(n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "assistant")


def test_the_first_question_takes_the_system_prompt_and_tools_from_the_cache(make_chat, load):
    engine = load()
    h = make_chat(engine, params={"max_new_tokens": 2})
    expected = shared_prefix_blocks(engine, h.app.cursor)
    assert expected >= 320  # the builtin tools' descriptions: hundreds of tokens
    out = h.run(QUESTION)
    turn = first_reply(h)
    assert turn.metrics.cached_tokens >= expected
    assert "error" not in out and "cancelled" not in out
    # Nothing of the warm-up is recorded: the conversation holds the question and reply.
    roles = [n.turn.role.value for n in h.app.cursor.path() if n.turn is not None]
    assert roles == ["user", "assistant"]
    assert [r["content"] for r in h.app.cursor.messages() if r["role"] == "user"] == [QUESTION]
    assert engine.metrics().total_requests == 2  # the warm-up and the question


def test_the_config_switch_turns_it_off(make_chat, load):
    engine = load()
    h = make_chat(engine, params={"max_new_tokens": 2}, warm_prefix_cache=False)
    h.run(QUESTION)
    assert first_reply(h).metrics.cached_tokens == 0
    assert engine.metrics().total_requests == 1


def test_it_is_skipped_when_the_prefix_cache_is_off(make_chat, load):
    engine = load(prefix_cache_mb=0)
    h = make_chat(engine, params={"max_new_tokens": 2})
    assert h.app._warmup is None
    h.run(QUESTION)
    assert engine.metrics().total_requests == 1


def test_it_is_skipped_for_an_engine_without_a_prefix_cache(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    h.run("hello")
    assert [r.messages[-1]["content"] for r in engine.requests] == ["hello"]


def test_a_failure_is_silent_and_kept_for_warnings(make_chat, load, tmp_path, monkeypatch):
    engine = load()
    real = engine.agenerate
    calls = []
    log = LibraryLog(tmp_path / "mp13chat.log")
    apps = []

    async def fails_first(request, **overrides):
        calls.append(request)
        if len(calls) == 1:
            # Fail once the app has its log (main sets it before start; the harness after).
            while not apps or apps[0].library_log is None:
                await asyncio.sleep(0.01)
            raise RuntimeError("out of memory")
        return await real(request, **overrides)

    monkeypatch.setattr(engine, "agenerate", fails_first)
    h = make_chat(engine, params={"max_new_tokens": 2})
    h.app.library_log = log
    apps.append(h.app)
    try:
        out = h.run(QUESTION)
        assert "out of memory" not in out and "library warnings" not in out
        assert first_reply(h).ok  # the question was answered, without the cache
        assert first_reply(h).metrics.cached_tokens == 0
        [note] = log.records
        assert "prefix cache failed" in note.getMessage() and "out of memory" in note.getMessage()
        assert "out of memory" in h.run("/warnings")
    finally:
        h.app.library_log = None
        log.close()
    assert "out of memory" in (tmp_path / "mp13chat.log").read_text()


def test_quit_while_it_runs_cancels_it(make_chat, load):
    engine = load()
    h = make_chat(engine)
    warmup = h.app._warmup
    assert warmup is not None and not warmup.done()
    h.run()  # just /quit
    h.close()
    assert warmup.done()  # finished or cancelled: never left running
    assert engine.metrics().total_requests <= 1


def test_a_question_waits_for_it_and_ctrl_c_cancels_only_the_wait(make_chat, load, monkeypatch):
    engine = load()
    real = engine.agenerate
    released = []

    async def held_first(request, **overrides):
        if len(released) == 0 and request.max_new_tokens == 1:  # the warm-up: held
            while not released:
                await asyncio.sleep(0.01)
        return await real(request, **overrides)

    monkeypatch.setattr(engine, "agenerate", held_first)
    h = make_chat(engine, params={"max_new_tokens": 2})
    expected = shared_prefix_blocks(engine, h.app.cursor)
    # Ctrl+C once the question runs (it waits for the held warm-up).
    out = h.run(QUESTION, interrupt_when=lambda: h.app._foreground._task is not None)
    assert "cancelled" in out  # Ctrl+C while the question waited: the question is cancelled
    assert [n for n in h.app.cursor.path() if n.turn is not None] == []  # nothing recorded
    assert h.app._warmup is not None and not h.app._warmup.done()  # the warm-up goes on
    released.append(True)
    h.run(QUESTION)
    assert h.app._warmup.done()
    assert first_reply(h).metrics.cached_tokens >= expected
