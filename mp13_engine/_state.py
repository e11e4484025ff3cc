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
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
import torch
from tokenizers import AddedToken, Tokenizer

from mp13_engine._markup import (
    Prompt,
    Span,
    SpecialText,
    encodable,
    encode_protected,
    special_tokens,
)
from mp13_engine._prompt import PromptFormatter

# Private-use text no prompt contains: marks "a control token came before" (see _encode_as_text).
_MIDDLE = "\ue000mp13-stretch\ue000"


#: Every encode: no BOS/EOS added (templates write their own), and no "sequence length is
#: longer than the specified maximum ... indexing errors" warning: the engine checks a
#: prompt against the model's context itself and ends an over-long one with a clear error.
_QUIET: Mapping[str, bool] = MappingProxyType({"add_special_tokens": False, "verbose": False})


class TokenizerGuard:
    """Thread-safe encode/decode on one tokenizer.

    ``encode_prompt`` encodes a rendered ``Prompt`` so that the spans where message
    data spells a control token become plain text (``mp13_engine._markup``); every
    other text is encoded exactly as the tokenizer always does (``encode``).

    ``decode`` keeps the special tokens that the chat template itself writes
    (``[TOOL_CALLS]``, ``<|channel|>``, ``<|python_tag|>``...: many models mark
    their tool-call and reasoning markup as special, and the tool-call parsers
    need it) and drops every other special token (BOS, padding, reserved ones).
    Decoding with ``skip_special_tokens=True`` would drop the markup too.

    Every text is made encodable first (``_markup.encodable``: a lone surrogate
    becomes U+FFFD, offsets unchanged), so no text makes the tokenizer raise.
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None):
        self.tokenizer = tokenizer
        # Re-entrant: training renders rows holding it and encodes them through this guard.
        self._lock = threading.RLock()
        specials = special_tokens(tokenizer)
        self._special = SpecialText(specials)
        self._drop = frozenset(
            i for i, text in specials.items() if text not in (chat_template or "")
        )
        self._as_text: Tokenizer | None = None  # a backend copy: special tokens are text

    @property
    def lock(self) -> threading.RLock:
        """The lock every use of the tokenizer holds (re-entrant); hold it to use it directly."""
        return self._lock

    def encode(self, text: str) -> list[int]:
        """``text`` as the tokenizer encodes it (control-token spellings are control tokens)."""
        with self._lock:
            return list(self.tokenizer(encodable(text), **_QUIET)["input_ids"])

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The ids ``generate`` feeds for ``prompt``: its forged spans encoded as text."""
        if not prompt.forged:
            return self.encode(prompt.text)
        if not getattr(self.tokenizer, "is_fast", False):
            return self._encode_pieces(prompt)
        return self.encode_offsets(prompt.text, prompt.forged)[0]

    def _encode_pieces(self, prompt: Prompt) -> list[int]:
        """Python tokenizers (no offsets, no backend): markup by id, the text between as text.

        Such tokenizers take ``split_special_tokens`` per call, so nothing shared changes.
        """
        text, forged, tok = encodable(prompt.text), set(prompt.forged), self.tokenizer
        ids: list[int] = []
        last = 0
        with self._lock:
            for s, e in (sp for sp in self._special.find(text) if sp not in forged):
                piece = tok(text[last:s], split_special_tokens=True, **_QUIET)
                ids += piece["input_ids"]
                ids.append(tok.convert_tokens_to_ids(text[s:e]))
                last = e
            tail = tok(text[last:], split_special_tokens=True, **_QUIET)
            return ids + list(tail["input_ids"])

    def encode_chat(
        self, text: str, data: Any, render: Callable[[Any], str]
    ) -> tuple[list[int], list[Span]]:
        """Ids and offsets of ``text`` = ``render(data)``, data spelling control tokens as text.

        Training encodes its chat rows with it, so a row cannot forge a turn either.
        """
        with self._lock:
            return self.encode_offsets(text, self._special.forged_in(text, data, render))

    def encode_offsets(
        self, text: str, forged: tuple[Span, ...] = ()
    ) -> tuple[list[int], list[Span]]:
        """Ids and character offsets of ``text``, with the ``forged`` spans encoded as text."""
        text = encodable(text)
        with self._lock:
            return encode_protected(
                self._encode_with_offsets, self._encode_as_text, self._special.ids, text, forged
            )

    def _encode_with_offsets(self, text: str) -> tuple[list[int], list[Span]]:
        enc = self.tokenizer(text, return_offsets_mapping=True, **_QUIET)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def _encode_as_text(self, text: str, middle: bool) -> tuple[list[int], list[Span]]:
        """``text`` with special-token matching off, as a stretch after a control token when
        ``middle`` (tokenizers that prefix only the first stretch, e.g. Metaspace
        ``prepend_scheme="first"``, must not prefix it)."""
        if self._as_text is None:
            # A private copy: flipping the shared backend's flag would race with other callers
            # of the tokenizer (transformers sets it on every call, and never restores it).
            # The marker is a non-special added token, still matched: put before a stretch,
            # it makes that stretch the second one, as it was in the whole prompt.
            backend = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())
            backend.add_tokens([AddedToken(_MIDDLE, special=False, normalized=False)])
            backend.encode_special_tokens = True
            self._as_text = backend
        backend = self._as_text
        if not middle:
            enc = backend.encode(text, add_special_tokens=False)
            return list(enc.ids), list(enc.offsets)
        enc = backend.encode(_MIDDLE + text, add_special_tokens=False)
        cut = len(_MIDDLE)
        return list(enc.ids[1:]), [(s - cut, e - cut) for s, e in enc.offsets[1:]]

    def decode(self, ids: list[int]) -> str:
        drop = self._drop
        kept = [i for i in ids if i not in drop] if drop else ids
        with self._lock:
            text: str = self.tokenizer.decode(
                kept, skip_special_tokens=False, spaces_between_special_tokens=False
            )
        return text


@attrs.define
class EngineState:
    """Runtime state of one engine (mutable; owned by the engine, model touched on the worker)."""

    model: Any
    tokens: TokenizerGuard
    formatter: PromptFormatter
    device: torch.device
    dtype: torch.dtype
    pad_id: int
    eos_ids: list[int]
    context_len: int | None


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
