# SPDX-License-Identifier: Apache-2.0
"""Model families of the tiny test models: tokens, chat template and HF architecture per family.

Concept: a ``FamilySpec`` is a frozen value that says everything family-specific about a tiny
model: which ``transformers`` architecture it uses (so adapter target-module defaults are the
real ones), its control tokens (``special=True``, as in the real tokenizer, tool-call markup
included where the real one marks it special), its other tool markup tokens (added as single,
non-special tokens), its BOS/EOS/PAD and end-of-turn tokens, and the name of its chat
template in ``_templates/``.

Invariants:
- ``FAMILIES`` is an immutable name -> spec registry; ``TINY_FAMILIES`` is its key tuple.
- Every token a spec names (bos, eos, pad, end of turn) is one of its control tokens.
- ``end_of_turn`` tokens are the generation EOS ids saved in ``generation_config.json``.
"""

from __future__ import annotations

from importlib import resources
from types import MappingProxyType

import attrs


@attrs.frozen
class FamilySpec:
    """Everything that differs between tiny model families."""

    name: str
    model_type: str  # transformers config ``model_type`` (architecture)
    template: str  # file name under ``_templates/``
    control_tokens: tuple[str, ...]
    markup_tokens: tuple[str, ...]
    eos_token: str
    pad_token: str
    end_of_turn: tuple[str, ...]
    bos_token: str | None = None
    add_bos: bool = False  # the tokenizer prepends bos_token when add_special_tokens=True
    # Tokenizer pipeline (see _tokenizer.PIPELINES). Qwen families must use "qwen2": transformers
    # loads every qwen2 checkpoint with Qwen2Tokenizer, which rebuilds exactly that pipeline.
    pipeline: str = "bytelevel"

    def __attrs_post_init__(self) -> None:
        named = [self.eos_token, self.pad_token, *self.end_of_turn]
        if self.bos_token is not None:
            named.append(self.bos_token)
        missing = [t for t in named if t not in self.control_tokens]
        if missing:
            raise ValueError(f"family {self.name!r}: {missing} must be listed in control_tokens")

    def chat_template(self) -> str:
        """The family's chat template text (package data)."""
        return (resources.files(__package__) / "_templates" / self.template).read_text("utf-8")


_CHATML = FamilySpec(
    name="chatml",
    model_type="qwen2",
    template="chatml.jinja",
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    markup_tokens=("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    end_of_turn=("<|im_end|>", "<|endoftext|>"),
    pipeline="qwen2",
)

# ChatML's tokens and pipeline, with reasoning markup.
_QWEN3 = attrs.evolve(
    _CHATML,
    name="qwen3",
    model_type="qwen3",
    template="qwen3.jinja",
    markup_tokens=(*_CHATML.markup_tokens, "<think>", "</think>"),
)

_LLAMA3 = FamilySpec(
    name="llama3",
    model_type="llama",
    template="llama3.jinja",
    control_tokens=(
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
        "<|finetune_right_pad_id|>",
    ),
    markup_tokens=(),  # JSON tool calls are plain text in Llama 3
    bos_token="<|begin_of_text|>",
    add_bos=True,
    eos_token="<|eot_id|>",
    pad_token="<|finetune_right_pad_id|>",
    end_of_turn=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
)

_MISTRAL = FamilySpec(
    name="mistral",
    model_type="mistral",
    template="mistral.jinja",
    control_tokens=(
        "<unk>",
        "<s>",
        "</s>",
        "[INST]",
        "[/INST]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
        "[TOOL_CALLS]",  # special, as in the real tokenizer: the engine's decoding keeps it
        "<pad>",
    ),
    markup_tokens=(),
    bos_token="<s>",
    add_bos=True,
    eos_token="</s>",
    pad_token="<pad>",
    end_of_turn=("</s>",),
)

_GRANITE = FamilySpec(
    name="granite",
    model_type="granite",
    template="granite.jinja",
    control_tokens=(
        "<|end_of_text|>",
        "<|start_of_role|>",
        "<|end_of_role|>",
        "<|start_of_cite|>",
        "<|end_of_cite|>",
    ),
    markup_tokens=("<|tool_call|>",),
    bos_token="<|end_of_text|>",  # as upstream: set, but never prepended
    eos_token="<|end_of_text|>",
    pad_token="<|end_of_text|>",
    end_of_turn=("<|end_of_text|>",),
)

# SmolLM2-135M-Instruct's prompt format: ChatML whose template has no tool support and
# writes a default system prompt; BOS/EOS/PAD as its tokenizer sets them (no BOS prepended,
# padding with the end-of-turn token).
_SMOLLM2 = FamilySpec(
    name="smollm2",
    model_type="llama",
    template="smollm2.jinja",
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    markup_tokens=(),
    bos_token="<|im_start|>",
    eos_token="<|im_end|>",
    pad_token="<|im_end|>",
    end_of_turn=("<|im_end|>",),
)

FAMILIES: MappingProxyType[str, FamilySpec] = MappingProxyType(
    {spec.name: spec for spec in (_CHATML, _LLAMA3, _MISTRAL, _GRANITE, _QWEN3, _SMOLLM2)}
)

TINY_FAMILIES: tuple[str, ...] = tuple(FAMILIES)
