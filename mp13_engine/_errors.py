# SPDX-License-Identifier: Apache-2.0
"""The engine's branch of mp13's one exception tree (root: ``Mp13Error``).

Every error mp13 raises on purpose is an ``Mp13Error``: one base for all four
packages, defined in the lowest layer and imported from its public place,
``mp13_toolbox.Mp13Error`` (``mp13_engine`` re-exports it). The whole tree, the
toolbox's branch and the other packages' roots are drawn in
``mp13_toolbox._errors``; the engine's branch is::

    Mp13Error                      (mp13_toolbox)
    └── EngineError
        ├── ConfigError            an EngineConfig / TrainingConfig field is invalid
        │   └── ConfigKeywordError     a misspelt EngineConfig / TrainingConfig keyword
        │                              (also mp13_toolbox.UnknownKeywordError, a TypeError)
        ├── ModelLoadError         the model cannot be loaded
        │   ├── ModelNotFoundError     path missing, hub id not in the local cache
        │   │   └── UnknownModelError      not one of mp13_engine.models.names()
        │   ├── NotCausalLMError       the checkpoint is not a causal language model
        │   ├── GGUFError              a GGUF file that cannot be used (not GGUF, several, arch)
        │   ├── MissingDependencyError an optional package (extra) is not installed
        │   └── ModelFetchError        fetching a named model failed (network, pip, checksum)
        ├── ChatTemplateError      messages given to a tokenizer without a chat template
        ├── RequestError           a request's field is invalid (``.field`` names it), or
        │   │                      its prompt cannot be rendered or does not fit
        │   └── RequestKeywordError    a misspelt Request keyword (also an UnknownKeywordError)
        ├── EngineClosedError      the engine was closed
        ├── AdapterError           adapter load / unload / compatibility problems
        ├── TrainingError          a training job cannot start or failed
        │   └── DatasetError           a dataset is missing or has rows of the wrong shape
        └── ToolFormatError        an unknown tool-call format, or a parser given the wrong type
            └── PayloadError           a tool-call payload is malformed (decoders raise it;
                                       parse records it, never raises it)

Errors raised by torch, transformers, peft or bitsandbytes are mapped to these at
the engine boundary (``raise ... from exc``). A request that fails while being
served does not raise: its ``Response`` has ``finish_reason=ERROR`` and ``error``.
Every message says what went wrong and what to do about it.
"""

from __future__ import annotations

from mp13_toolbox import Mp13Error, UnknownKeywordError


class EngineError(Mp13Error):
    """Base of the engine's errors."""


class ConfigError(EngineError, ValueError):
    """A configuration field has an invalid value; the message names it and the allowed values."""


class ConfigKeywordError(ConfigError, UnknownKeywordError):
    """A keyword ``EngineConfig`` or ``TrainingConfig`` has no field for; names the closest one.

    Also a ``TypeError``, which is what such a call raised before.
    """


class ModelLoadError(EngineError):
    """The model or its tokenizer could not be loaded."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model path does not exist, or a hub id is not in the local cache."""


class NotCausalLMError(ModelLoadError):
    """The checkpoint exists but is not a causal (decoder-only) language model."""


class UnknownModelError(ModelNotFoundError, LookupError):
    """A name given to ``mp13_engine.models`` is not one of ``models.names()``."""


class GGUFError(ModelLoadError, ValueError):
    """A GGUF file cannot be used: not a GGUF, one of several, or an unsupported architecture."""


class MissingDependencyError(ModelLoadError, ImportError):
    """An optional package is missing; the message names the extra to install."""


class ModelFetchError(ModelLoadError):
    """Fetching a named model failed (no network, pip failing, a corrupt download)."""


class ChatTemplateError(EngineError, ValueError):
    """Chat messages were given but the tokenizer has no chat template, or one that is not
    valid Jinja."""


class RequestError(EngineError, ValueError):
    """A request's parameters are invalid; ``field`` names the ``Request`` field, when one is."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class RequestKeywordError(RequestError, UnknownKeywordError):
    """A keyword ``Request`` has no field for (``temprature=``); names the closest one.

    Also a ``TypeError``, which is what such a call raised before.
    """


class EngineClosedError(EngineError, RuntimeError):
    """The engine was closed; create a new one with ``Engine.load``."""


class AdapterError(EngineError):
    """An adapter cannot be loaded, found, combined or unloaded."""


class TrainingError(EngineError):
    """A training job cannot start, or failed."""


class DatasetError(TrainingError, ValueError):
    """A training dataset is missing or has rows of the wrong shape."""


class ToolFormatError(EngineError, ValueError):
    """An unknown or unusable tool-call format, or a parser given something that is not text."""
