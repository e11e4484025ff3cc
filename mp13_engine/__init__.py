# SPDX-License-Identifier: Apache-2.0
"""mp13_engine: a batched, multi-LoRA inference and training engine on HF transformers.

Importing this package does not import torch: the message types, configs and
errors are torch-free, and names whose modules need torch (``Engine``,
``TrainingJob``, ...) are resolved on first access through the module-level
``__getattr__`` below (PEP 562). ``mp13_context`` relies on this.
``mp13_engine.models`` (named real models) is a torch-free submodule:
``from mp13_engine import models``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mp13_engine._adapters import AdapterInfo, AdapterSource
from mp13_engine._config import EngineConfig
from mp13_engine._errors import (
    AdapterError,
    ChatTemplateError,
    ConfigError,
    ConfigKeywordError,
    DatasetError,
    EngineClosedError,
    EngineError,
    GGUFError,
    MissingDependencyError,
    ModelFetchError,
    ModelLoadError,
    ModelNotFoundError,
    NotCausalLMError,
    RequestError,
    RequestKeywordError,
    ToolFormatError,
    TrainingError,
    UnknownModelError,
)
from mp13_engine._metrics import EngineMetrics
from mp13_engine._request_fields import REQUEST_FIELDS, check_request_field
from mp13_engine._streams import AsyncRequestStream, RequestStream
from mp13_engine._training._config import (
    TrainingConfig,
    TrainingEvent,
    TrainingEventKind,
    TrainingResult,
)
from mp13_engine._types import (
    BASE_ADAPTER,
    Chunk,
    FinishReason,
    Request,
    RequestMetrics,
    Response,
    TextScore,
    TokenLogprob,
    adapter_names,
)
from mp13_toolbox import Mp13Error

# Public names whose modules import torch: name -> module. Immutable mapping.
_LAZY: dict[str, str] = {
    "TrainingJob": "mp13_engine._training._job",
    "Engine": "mp13_engine._engine",
}

if TYPE_CHECKING:  # pragma: no cover
    from mp13_engine._engine import Engine
    from mp13_engine._training._job import TrainingJob


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mp13_engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
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
