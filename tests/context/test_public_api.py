# SPDX-License-Identifier: MIT
"""The public surface of mp13_context is pinned."""

import asyncio

import pytest

import mp13_context
import mp13_context.testing
from mp13_context import EngineClient
from mp13_context.testing import FakeEngine
from mp13_engine import Request


def test_names_are_pinned():
    assert mp13_context.__all__ == [
        "PARAMS",
        "AdapterCommands",
        "ChatContext",
        "Command",
        "CommandError",
        "CommandKind",
        "ContextError",
        "ContextKeywordError",
        "ConversationData",
        "ConversationInfo",
        "Cursor",
        "CursorError",
        "EffectiveSettings",
        "EngineClient",
        "Event",
        "EventCallback",
        "EventKind",
        "ImportConflictError",
        "ImportLimits",
        "ImportReport",
        "IntegrityProblem",
        "IntegrityReport",
        "Node",
        "NodeKind",
        "NotFoundError",
        "ParamCommands",
        "ReadOnlyError",
        "ReplayProgress",
        "ReplayReport",
        "ReplayTurn",
        "Role",
        "SavedPosition",
        "SchemaError",
        "SearchHit",
        "SerializationError",
        "Session",
        "SessionData",
        "StoreError",
        "SystemCommands",
        "SystemMode",
        "SystemPrompt",
        "TamperedError",
        "ToolCommands",
        "TryOut",
        "Turn",
        "areplay",
        "replay",
    ]


def test_testing_names_are_pinned():
    assert mp13_context.testing.__all__ == [
        "FakeEngine",
        "FakeReply",
        "echo",
        "fake_logprobs",
    ]


def test_parameter_names_are_public():
    assert {"temperature", "max_new_tokens", "max_tool_rounds"} <= set(mp13_context.PARAMS)


def test_api_md_names_exist():
    for name in (
        "Session",
        "ChatContext",
        "Cursor",
        "Turn",
        "replay",
        "ReplayReport",
        "SearchHit",
        "EngineClient",
        "ContextError",
    ):
        assert name in mp13_context.__all__


def test_fake_engine_satisfies_the_protocol():
    assert isinstance(FakeEngine(), EngineClient)


def test_context_errors_are_mp13_errors():
    from mp13_toolbox import Mp13Error

    assert issubclass(mp13_context.ContextError, Mp13Error)
    for name in (
        "CursorError",
        "CommandError",
        "StoreError",
        "SchemaError",
        "NotFoundError",
        "SerializationError",
    ):
        assert issubclass(getattr(mp13_context, name), mp13_context.ContextError)


def test_the_parameter_registry_is_read_only():
    with pytest.raises(TypeError):
        mp13_context.PARAMS["temperature"] = lambda name, value: value
    with pytest.raises(TypeError):
        del mp13_context.PARAMS["seed"]
    assert "temperature" in mp13_context.PARAMS  # a live view of the registry


def test_the_fake_engine_takes_raw_prompts_and_continuations():
    engine = FakeEngine()
    assert engine.format_prompt(Request(prompt="raw text")) == "raw text"
    assert asyncio.run(engine.agenerate(Request(prompt="raw text"))).text == "echo: raw text"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once"}]
    more = asyncio.run(engine.agenerate(Request(messages=messages, continue_final=True)))
    assert more.text == " (more)"


def test_the_fake_engine_can_be_shared_by_threads_with_their_own_loops():
    """Each thread of a sync-API app runs its own event loop; a FakeEngine they share
    iterated its running set while another thread changed it, and lost counts."""
    import sys
    import threading

    engine = FakeEngine(chunk_size=1)
    errors: list[BaseException] = []

    def ask(n: int) -> None:
        async def many() -> None:
            for i in range(20):
                reply = await engine.agenerate(Request(prompt=f"t{n} q{i}"))
                assert reply.text == f"echo: t{n} q{i}"

        try:
            asyncio.run(many())
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(engine.requests) == 160
    assert engine.in_flight == 0
    assert 1 <= engine.max_in_flight <= 8
