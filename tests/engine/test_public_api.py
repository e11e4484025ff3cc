# SPDX-License-Identifier: Apache-2.0
"""The exact public surfaces of mp13_engine, mp13_engine.models and mp13_engine.testing.

Adding or removing a public name is a decision: it changes this list on purpose.
(``tests/test_public_surfaces.py`` checks every package's ``__all__`` is sorted and resolves.)
"""

import mp13_engine
from mp13_engine import models, testing


def test_mp13_engine_names_are_pinned():
    assert mp13_engine.__all__ == [
        "BASE_ADAPTER",
        "REQUEST_FIELDS",
        "AdapterError",
        "AdapterInfo",
        "AdapterSource",
        "AsyncRequestStream",
        "ChatTemplateError",
        "Chunk",
        "ConfigError",
        "ConfigKeywordError",
        "DatasetError",
        "Engine",
        "EngineClosedError",
        "EngineConfig",
        "EngineError",
        "EngineMetrics",
        "FinishReason",
        "GGUFError",
        "MissingDependencyError",
        "ModelFetchError",
        "ModelLoadError",
        "ModelNotFoundError",
        "Mp13Error",
        "NotCausalLMError",
        "Request",
        "RequestError",
        "RequestKeywordError",
        "RequestMetrics",
        "RequestStream",
        "Response",
        "TextScore",
        "TokenLogprob",
        "ToolFormatError",
        "TrainingConfig",
        "TrainingError",
        "TrainingEvent",
        "TrainingEventKind",
        "TrainingJob",
        "TrainingResult",
        "UnknownModelError",
        "adapter_names",
        "check_request_field",
    ]


def test_mp13_engine_models_names_are_pinned():
    assert models.__all__ == [
        "FetchProgress",
        "ModelFetchError",
        "NamedModel",
        "UnknownModelError",
        "cache_dir",
        "describe",
        "fetch",
        "names",
    ]


def test_mp13_engine_testing_names_are_pinned():
    assert testing.__all__ == [
        "BUILD_VERSION",
        "DEMO_PROMPTS",
        "DEMO_VERSION",
        "FAMILIES",
        "TINY_FAMILIES",
        "TINY_SIZES",
        "DemoRecipe",
        "FamilySpec",
        "build_demo_model",
        "build_tiny_encoder",
        "build_tiny_model",
        "build_tokenizer",
        "demo_model_path",
        "demo_tools",
        "tiny_model_path",
    ]


def test_api_md_names_exist():
    for name in (
        "Engine",
        "EngineConfig",
        "Request",
        "Response",
        "Chunk",
        "RequestMetrics",
        "FinishReason",
        "TrainingConfig",
        "TrainingJob",
        "Mp13Error",
        "EngineMetrics",
    ):
        assert name in mp13_engine.__all__


def test_responses_built_by_hand_normalise_their_sequences():
    """Fake engines build Responses themselves: one name, None or a list all store a tuple."""
    from mp13_engine import RequestMetrics, Response
    from mp13_toolbox import ToolCall

    assert RequestMetrics(adapters="pirate").adapters == ("pirate",)
    assert RequestMetrics(adapters=None).adapters == ()
    assert RequestMetrics(adapters=["a", "b"]).adapters == ("a", "b")
    call = ToolCall("f", {})
    response = Response(id="r", tool_calls=[call], parse_errors="bad json")
    assert response.tool_calls == (call,) and response.parse_errors == ("bad json",)
    assert Response(id="r", parse_errors=None).parse_errors == ()


def test_every_engine_enum_a_user_reads_prints_as_its_value():
    """One base (``StrEnum``): ``str()`` and f-strings give the value on every Python version,
    so a finish reason prints ``stop`` as an adapter source prints ``loaded``."""
    from mp13_engine import AdapterSource, FinishReason, TrainingEventKind

    for member in (FinishReason.STOP, AdapterSource.LOADED, TrainingEventKind.STEP):
        assert str(member) == f"{member}" == member.value
        assert member == member.value  # still a str: comparisons with plain text hold
    assert f"finished: {FinishReason.LENGTH}" == "finished: length"
