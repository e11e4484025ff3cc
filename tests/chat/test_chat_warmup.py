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


# -- warming again when a command changes what comes before the next question ---------
#
# Was: only the first conversation was warmed; after /system, /tools, /open (a saved
# conversation) the next first reply computed its whole prompt again.


def wait_for_warmup(h) -> None:
    h.call(h.app._after_warmup())


def test_a_changed_system_prompt_is_warmed_again(make_chat, load):
    engine = load()
    h = make_chat(engine, params={"max_new_tokens": 2})
    wait_for_warmup(h)
    first = h.app._warmup
    h.run("/system set You are a pirate who answers every question in rhyming couplets.")
    assert h.app._warmup is not first  # a new warm-up, started without waiting for it
    expected = shared_prefix_blocks(engine, h.app.cursor)
    assert expected >= 320
    h.run(QUESTION)
    assert first_reply(h).metrics.cached_tokens >= expected
    assert engine.metrics().total_requests == 3  # two warm-ups and the question
    roles = [n.turn.role.value for n in h.app.cursor.path() if n.turn is not None]
    assert roles == ["user", "assistant"]  # the warm-ups recorded nothing


def manual(topic: str) -> str:
    """Look up a topic in the manual.

    The manual covers installation, configuration, every command line flag, every
    configuration field, the session file format, the tool approval rules, the prefix
    cache, adapters, training, replay, export and import, and troubleshooting for each.

    Args:
        topic: the topic to look up, e.g. "installation" or "prefix cache"
    """
    return topic


def test_an_advertised_tool_is_warmed_again(make_chat, load):
    from mp13chat import register_tool

    engine = load()
    tool = register_tool(manual, mode="silent")
    h = make_chat(
        engine, params={"max_new_tokens": 2}, builtin_tools=False, app_kwargs={"tools": [tool]}
    )
    wait_for_warmup(h)
    before = engine.count_tokens(h.app.cursor.request(QUESTION))
    out = h.run("/tools mode manual advertised")
    assert "error" not in out
    assert engine.count_tokens(h.app.cursor.request(QUESTION)) > before + 50  # its description
    expected = shared_prefix_blocks(engine, h.app.cursor)
    h.run(QUESTION)
    assert first_reply(h).metrics.cached_tokens >= expected
    assert engine.metrics().total_requests == 3


def test_a_tool_a_wrapper_app_registers_after_start_is_warmed(make_chat, load):
    engine = load()
    h = make_chat(engine, params={"max_new_tokens": 2}, builtin_tools=False)
    wait_for_warmup(h)
    first = h.app._warmup

    async def register() -> None:  # e.g. from the wrapper app's own command
        h.app.register_tool(manual)

    h.call(register())
    assert h.app._warmup is not first
    expected = shared_prefix_blocks(engine, h.app.cursor)
    h.run(QUESTION)
    assert first_reply(h).metrics.cached_tokens >= expected
    assert engine.metrics().total_requests == 3


def test_commands_that_leave_the_prefix_as_it_was_warm_nothing(make_chat, load):
    engine = load()
    h = make_chat(engine, params={"max_new_tokens": 2})
    wait_for_warmup(h)
    first = h.app._warmup
    # A sampling setting and two commands that only show things.
    h.run("/set temperature 0.5", "/help", "/params")
    assert h.app._warmup is first
    h.run(QUESTION)
    assert engine.metrics().total_requests == 2


def test_a_second_change_cancels_the_warmup_of_the_first(make_chat, load, monkeypatch):
    engine = load()
    real = engine.agenerate
    held = []

    async def hold_pirates(request, **overrides):
        if request.max_new_tokens == 1 and "pirate" in request.messages[0]["content"]:
            held.append(request)
            while True:  # never finishes: only a cancel ends it
                await asyncio.sleep(0.01)
        return await real(request, **overrides)

    monkeypatch.setattr(engine, "agenerate", hold_pirates)
    h = make_chat(engine, params={"max_new_tokens": 2})
    wait_for_warmup(h)
    h.run("/system set You are a pirate.")
    pirate = h.app._warmup
    assert pirate is not None and not pirate.done() and len(held) == 1
    h.run("/system set You are a lighthouse keeper who answers in one short sentence.")
    assert pirate.cancelled()  # its prefix is no longer wanted
    expected = shared_prefix_blocks(engine, h.app.cursor)
    h.run(QUESTION)  # waits for the keeper's warm-up, not the cancelled one
    turn = first_reply(h)
    assert turn.ok and turn.metrics.cached_tokens >= expected


def test_opening_a_saved_conversation_warms_its_history(make_chat, load, tmp_path):
    saved = str(tmp_path / "saved.db")
    writer = make_chat(load(), params={"max_new_tokens": 2}, session=saved)
    long_question = " ".join(["tell me about the tide tables of the northern coast"] * 20)
    writer.run(long_question)
    writer.close()

    engine = load()  # another process, in effect: its prefix cache knows nothing of it
    h = make_chat(engine, params={"max_new_tokens": 2})
    wait_for_warmup(h)
    out = h.run(f"/open {saved}")
    assert "error" not in out
    expected = shared_prefix_blocks(engine, h.app.cursor)
    assert expected > engine.count_tokens(long_question)  # the history is in it
    h.run(QUESTION)
    replies = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "assistant"]
    assert replies[-1].metrics.cached_tokens >= expected
