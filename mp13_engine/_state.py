# SPDX-License-Identifier: Apache-2.0
"""``EngineState``: the loaded model and everything derived from it, for one engine.

The adapter manager may replace ``model`` (wrapping the base model as a
``PeftModel`` when the first adapter loads); it does so only through
``engine._run_on_worker``, i.e. between two steps. ``TokenizerGuard`` serialises
tokenizer calls: HF fast tokenizers raise "Already borrowed" when one thread
encodes while another changes padding/truncation state.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs
import torch

from mp13_engine._config import EngineConfig
from mp13_engine._prompt import PromptFormatter


class TokenizerGuard:
    """Thread-safe encode/decode on one tokenizer.

    ``decode`` keeps the special tokens that the chat template itself writes
    (``[TOOL_CALLS]``, ``<|channel|>``, ``<|python_tag|>``...: many models mark
    their tool-call and reasoning markup as special, and the tool-call parsers
    need it) and drops every other special token (BOS, padding, reserved ones).
    Decoding with ``skip_special_tokens=True`` would drop the markup too.
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self._drop = frozenset(
            i for i, text in _special_tokens(tokenizer).items() if text not in (chat_template or "")
        )

    def encode(self, text: str) -> list[int]:
        with self._lock:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        drop = self._drop
        kept = [i for i in ids if i not in drop] if drop else ids
        with self._lock:
            return self.tokenizer.decode(
                kept, skip_special_tokens=False, spaces_between_special_tokens=False
            )


def _special_tokens(tokenizer: Any) -> dict[int, str]:
    """Id -> text of every special token (added tokens marked special, BOS/EOS/PAD/...)."""
    found = {
        int(i): str(token.content)
        for i, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
        if getattr(token, "special", False)
    }
    ids = [i for i in getattr(tokenizer, "all_special_ids", ()) if i is not None]
    for i, text in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True):
        found.setdefault(int(i), str(text))
    return found


@attrs.define
class EngineState:
    """Runtime state of one engine (mutable; owned by the engine, model touched on the worker)."""

    config: EngineConfig
    model: Any
    tokenizer: Any
    tokens: TokenizerGuard
    formatter: PromptFormatter
    device: torch.device
    dtype: torch.dtype
    pad_id: int
    eos_ids: list[int]
    context_len: int | None
    tool_format: str | None = None


def eos_ids_of(model: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids from the generation config and the tokenizer (deduplicated)."""
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if value is None:
            continue
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


def context_len_of(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
