# SPDX-License-Identifier: Apache-2.0
"""Model families of the tiny test models: tokens, chat template and HF architecture per family.

Concept: a ``FamilySpec`` is a frozen value that says everything family-specific about a tiny
model: which ``transformers`` architecture it uses (so adapter target-module defaults are the
real ones), its control tokens (``special=True``), its tool markup tokens (added as single,
non-special tokens so decoded text keeps them for the tool-call parsers), its BOS/EOS/PAD and
end-of-turn tokens, and the name of its chat template in ``_templates/``.

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

    def __attrs_post_init__(self) -> None:
        named = [self.eos_token, self.pad_token, *self.end_of_turn]
        if self.bos_token is not None:
            named.append(self.bos_token)
        missing = [t for t in named if t not in self.control_tokens]
        if missing:
            raise ValueError(f"family {self.name!r}: {missing} must be listed in control_tokens")

    def chat_template(self) -> str:
        """The family's chat template text (package data)."""
        return resources.files(__package__).joinpath("_templates", self.template).read_text("utf-8")


_CHATML = FamilySpec(
    name="chatml",
    model_type="qwen2",
    template="chatml.jinja",
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    markup_tokens=("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    end_of_turn=("<|im_end|>", "<|endoftext|>"),
)

FAMILIES: MappingProxyType[str, FamilySpec] = MappingProxyType(
    {spec.name: spec for spec in (_CHATML,)}
)

TINY_FAMILIES: tuple[str, ...] = tuple(FAMILIES)
