# SPDX-License-Identifier: Apache-2.0
"""Offline byte-level BPE tokenizers for the tiny test models.

Concept: every tiny model gets a real ``tokenizers`` byte-level BPE tokenizer, wrapped as a
``PreTrainedTokenizerFast``. Its merges are learned here, in pure Python, from the small corpus in
``_corpus.py``, so that no file and no network is needed.

Invariants:
- Deterministic: merges are chosen by (highest count, then smallest pair), so the same corpus
  and size always give the same vocabulary, whatever the process or hash seed.
- Lossless: the base alphabet is all 256 bytes (GPT-2 byte-to-unicode map), so any text,
  unicode included, encodes and decodes back to itself. Exception, as upstream: the "qwen2"
  pipeline NFC-normalises first (transformers always loads Qwen2 checkpoints with
  ``Qwen2Tokenizer``, which rebuilds that pipeline), so there only NFC text round-trips.
- The family's special and markup tokens are added tokens, each one id. Control tokens are
  ``special=True`` (dropped by ``skip_special_tokens``); tool markup tokens are ``special=False``
  so that decoded text keeps them for the tool-call parsers.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

# Qwen2Tokenizer's split regex (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
_QWEN2_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

PIPELINES = ("bytelevel", "qwen2")


def _pipeline(name: str) -> tuple[normalizers.Normalizer | None, pre_tokenizers.PreTokenizer]:
    """(normalizer, pre-tokenizer) of a named pipeline; see ``PIPELINES``."""
    if name == "qwen2":
        split = pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated", invert=False)
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return normalizers.NFC(), pre_tokenizers.Sequence([split, byte_level])
    return None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _byte_alphabet() -> list[str]:
    """The GPT-2 byte-to-unicode alphabet in byte order (token id i is byte i).

    Printable latin-1 bytes map to themselves; the others to code points from 256 up, which is
    the same map the ``ByteLevel`` pre-tokenizer applies.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def learn_merges(
    corpus: str, num_merges: int, pipeline: str = "bytelevel"
) -> list[tuple[str, str]]:
    """Learn up to ``num_merges`` BPE merges from ``corpus`` (byte-level pre-tokenized).

    Incremental pair counts with a lazy max-heap; ties go to the lexicographically smallest
    pair so the result never depends on iteration order.
    """
    norm, pre = _pipeline(pipeline)
    text = norm.normalize_str(corpus) if norm is not None else corpus
    word_counts = Counter(piece for piece, _ in pre.pre_tokenize_str(text))
    # Sorted so word indices (and hence everything below) are reproducible.
    words = [list(w) for w in sorted(word_counts)]
    freqs = [word_counts[w] for w in sorted(word_counts)]

    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for idx, symbols in enumerate(words):
        for pair in itertools.pairwise(symbols):
            pair_counts[pair] += freqs[idx]
            where[pair].add(idx)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    while heap and len(merges) < num_merges:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue  # stale heap entry
        merges.append(pair)
        merged = pair[0] + pair[1]
        touched: set[tuple[str, str]] = set()
        for idx in sorted(where.pop(pair, ())):
            symbols, freq = words[idx], freqs[idx]
            for old in itertools.pairwise(symbols):
                pair_counts[old] -= freq
                touched.add(old)
            out: list[str] = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            words[idx] = out
            for new in itertools.pairwise(out):
                pair_counts[new] += freq
                where[new].add(idx)
                touched.add(new)
        pair_counts.pop(pair, None)
        for p in sorted(touched):
            count = pair_counts.get(p, 0)
            if count > 0:
                heapq.heappush(heap, (-count, p))
            else:
                pair_counts.pop(p, None)
    return merges


def build_bpe_tokenizer(
    corpus: str,
    vocab_size: int,
    special_tokens: Sequence[str],
    markup_tokens: Sequence[str],
    bos_token: str | None = None,
    pipeline: str = "bytelevel",
) -> Tokenizer:
    """A byte-level BPE ``Tokenizer`` with ``vocab_size`` base tokens plus the added tokens.

    ``bos_token`` (if given) is prepended by the post-processor, as the real Llama 3 and
    Mistral tokenizers do when ``add_special_tokens=True``.
    """
    alphabet = _byte_alphabet()
    merges = learn_merges(corpus, max(0, vocab_size - len(alphabet)), pipeline)
    vocab: dict[str, int] = {sym: i for i, sym in enumerate(alphabet)}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    norm, tok.pre_tokenizer = _pipeline(pipeline)
    if norm is not None:
        tok.normalizer = norm
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in markup_tokens])
    if bos_token is not None:
        bos_id = tok.token_to_id(bos_token)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_token} $A",
            pair=f"{bos_token} $A {bos_token} $B",
            special_tokens=[(bos_token, bos_id)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok
