# SPDX-License-Identifier: Apache-2.0
"""Which checkpoints mp13 serves: decoder-only causal language models.

One check, used before any weights load (a checkpoint directory, a hub id) and
before the slow conversion of a GGUF file, so an encoder-decoder or encoder-only
model is refused at once with a message naming what it is.
"""

from __future__ import annotations

from typing import Any

from mp13_engine._errors import NotCausalLMError

#: Architecture name endings of causal LM heads.
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def check_causal(hf_config: Any, source: str) -> None:
    """Raise ``NotCausalLMError`` unless ``hf_config`` describes a decoder-only causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = getattr(hf_config, "model_type", None)
    archs = list(getattr(hf_config, "architectures", None) or [])
    causal_arch = any(a.endswith(CAUSAL_SUFFIXES) for a in archs)
    if (
        model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        or getattr(hf_config, "is_encoder_decoder", False)
        or (archs and not causal_arch)
    ):
        raise NotCausalLMError(
            f"{source} holds a {model_type!r} model ({', '.join(archs) or 'no architectures'}), "
            "which is not a causal (decoder-only) language model; mp13 needs one such as "
            "Llama, Qwen2, Mistral or Granite"
        )
