# SPDX-License-Identifier: Apache-2.0
"""Only the chat template's own markup is special: message data never forges control tokens.

Concept: a rendered chat prompt is one string, and a tokenizer turns every
spelling of a special token in it (``<|im_start|>``, ``[INST]``,
``<|eot_id|>``...) into that control token, wherever the spelling came from. A
user message, a tool result, an imported turn or a tool description that spells
one could then forge a system or user turn. ``SpecialText`` finds which
spellings in a rendered prompt came from the data (``forged`` spans) and
``encode_protected`` tokenizes those as plain text, everything else exactly as
the tokenizer always does.

How the forged spans are found: the data (every string in the messages, tools
and template variables) is rendered a second time with each special-token
spelling replaced by a same-length run of a filler character that no special
token contains (``defang``). The template's own markup is the same in both
renderings; a spelling present in the real rendering where the defanged one has
filler is data. When a template makes the two renderings differ in length (it
parses content, e.g. splits on a marker), the two are aligned with ``difflib``
instead, and a spelling counts as markup only where it is matched, character
for character, to markup of the defanged rendering. The second rendering only
happens when some data string spells a special token, so ordinary prompts cost
nothing extra and tokenize exactly as before.

How they are encoded (``encode_protected``): the prompt is tokenized as usual,
with offsets. A tokenizer splits text at special tokens and tokenizes each
stretch in between on its own, so only the stretches between two genuine
control tokens that contain a forged one change: each is re-tokenized with
special-token matching off (``encode_special_tokens``, on a private copy of the
backend so the shared tokenizer's state is never touched). Genuine control
tokens, their ``lstrip``/``rstrip`` whitespace and every other stretch keep
their ids.

Invariants: torch-free; ``encode_protected`` with no forged span returns the
tokenizer's own ids unchanged; no id of a special token whose spelling lies in a
forged span survives; raw prompts (``Request.prompt``) are not data (their
author writes the markup) and are never defanged.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

Span = tuple[int, int]
#: ``text -> (ids, offsets)``: a tokenization without added BOS/EOS, with character offsets.
Encoder = Callable[[str], tuple[list[int], list[Span]]]
#: ``(text, middle) -> (ids, offsets)``: the same with special-token matching off; ``middle``
#: says the text follows a control token (it is not the start of the prompt).
TextEncoder = Callable[[str, bool], tuple[list[int], list[Span]]]

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (same length, same offsets).

    A lone surrogate (Python's reading of an undecodable byte, e.g. a file name from
    ``os.listdir`` in a tool result) is not text a tokenizer can encode: it raised
    a raw ``TypeError`` from ``generate``. The model sees the replacement character,
    as ``bytes.decode(errors="replace")`` would show it.
    """
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


# Filler candidates: ASCII (JSON never escapes them, so templates and tool formats that
# dump data as JSON keep the length), not whitespace (``trim`` keeps them), and rarely
# part of a control token's spelling. The first one no special token contains is used.
_FILLERS = "#~^=@%!$&*+?"


@attrs.frozen
class Prompt:
    """A rendered prompt and the spans of its text that spell control tokens but are data."""

    text: str
    forged: tuple[Span, ...] = ()


def special_tokens(tokenizer: Any) -> dict[int, str]:
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


class SpecialText:
    """The special-token spellings of one tokenizer, and how to tell markup from data."""

    def __init__(self, specials: Mapping[int, str]):
        texts = sorted({t for t in specials.values() if t}, key=len, reverse=True)
        self.ids = frozenset(specials)
        # Longest first: at one position the tokenizer matches the longest added token.
        self._pattern = re.compile("|".join(map(re.escape, texts))) if texts else None
        used = set("".join(texts))
        self.filler = next((c for c in _FILLERS if c not in used), "\x7f")

    @classmethod
    def of(cls, tokenizer: Any) -> SpecialText:
        return cls(special_tokens(tokenizer))

    def find(self, text: str) -> list[Span]:
        """Spans of special-token spellings in ``text``, leftmost-longest, non-overlapping."""
        if self._pattern is None:
            return []
        return [m.span() for m in self._pattern.finditer(text)]

    def spelled_in(self, data: Any) -> bool:
        """Whether any string inside ``data`` (dicts, lists, tuples) spells a special token."""
        pattern = self._pattern
        return pattern is not None and any(pattern.search(s) for s in _strings(data))

    def defang(self, data: Any) -> Any:
        """``data`` with every special-token spelling in its strings replaced by filler."""
        pattern, filler = self._pattern, self.filler
        if pattern is None:
            return data

        def sub(text: str) -> str:
            return pattern.sub(lambda m: filler * (m.end() - m.start()), text)

        return _map_strings(data, sub)

    def forged_in(self, text: str, data: Any, render: Callable[[Any], str]) -> tuple[Span, ...]:
        """Spellings in ``text`` = ``render(data)`` that come from ``data``, not the template.

        ``render`` is called a second time, on ``defang(data)``, only when some string
        of ``data`` spells a special token.
        """
        if not self.spelled_in(data):
            return ()
        return self.forged(text, render(self.defang(data)))

    def forged(self, text: str, defanged: str) -> tuple[Span, ...]:
        """Spellings in ``text`` (a rendering of the data) that are not markup.

        ``defanged`` is the same template rendered with ``defang(data)``.
        """
        spans = self.find(text)
        if not spans:
            return ()
        if len(text) == len(defanged) and _same_but_filler(text, defanged, spans, self.filler):
            return tuple((s, e) for s, e in spans if defanged[s:e] != text[s:e])
        markup = _aligned_markup(text, defanged, set(self.find(defanged)))
        return tuple(span for span in spans if span not in markup)


def _same_but_filler(text: str, defanged: str, spans: list[Span], filler: str) -> bool:
    """Whether ``defanged`` is ``text`` with some of ``spans`` turned into filler."""
    rebuilt, last = [], 0
    for s, e in spans:
        piece = defanged[s:e]
        rebuilt.append(text[last:s])
        rebuilt.append(piece if piece == filler * (e - s) else text[s:e])
        last = e
    rebuilt.append(text[last:])
    return "".join(rebuilt) == defanged


def _aligned_markup(text: str, defanged: str, markup_there: set[Span]) -> set[Span]:
    """Spans of ``text`` matched character for character to a markup span of ``defanged``."""
    found: set[Span] = set()
    matcher = difflib.SequenceMatcher(None, defanged, text, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for s, e in markup_there:
            if a <= s and e <= a + size:
                found.add((s - a + b, e - a + b))
    return found


def _strings(data: Any) -> Iterable[str]:
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _map_strings(data: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(data, str):
        return fn(data)
    if isinstance(data, Mapping):
        return {_map_strings(k, fn): _map_strings(v, fn) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_map_strings(v, fn) for v in data)
    return data


def encode_protected(
    encode: Encoder,
    encode_as_text: TextEncoder,
    special_ids: frozenset[int],
    text: str,
    forged: Iterable[Span],
) -> tuple[list[int], list[Span]]:
    """Token ids and offsets of ``text`` with the ``forged`` spellings encoded as text.

    ``encode`` is the tokenizer as it always runs; ``encode_as_text`` the same
    tokenizer with special-token matching off. See the module docstring.
    """
    ids, offsets = encode(text)
    forged = sorted(forged)
    if not forged:
        return ids, offsets

    def is_forged(k: int) -> bool:
        s, e = offsets[k]
        return ids[k] in special_ids and any(fs < e and s < fe for fs, fe in forged)

    genuine = [k for k, i in enumerate(ids) if i in special_ids and not is_forged(k)]
    regions: list[tuple[int, int]] = []  # token index ranges [lo, hi) to re-encode
    for k in (k for k in range(len(ids)) if is_forged(k)):
        # The stretch the tokenizer encoded on its own: between the genuine control tokens
        # around the forged one (their offsets include any whitespace they strip).
        at = bisect.bisect_left(genuine, k)
        lo = genuine[at - 1] + 1 if at > 0 else 0
        hi = genuine[at] if at < len(genuine) else len(ids)
        if not regions or regions[-1] != (lo, hi):
            regions.append((lo, hi))
    out_ids, out_offsets, done = [], [], 0
    for lo, hi in regions:
        out_ids += ids[done:lo]
        out_offsets += offsets[done:lo]
        start = offsets[lo - 1][1] if lo > 0 else 0
        end = offsets[hi][0] if hi < len(ids) else len(text)
        sub_ids, sub_offsets = encode_as_text(text[start:end], lo > 0)
        out_ids += sub_ids
        out_offsets += [(s + start, e + start) for s, e in sub_offsets]
        done = hi
    out_ids += ids[done:]
    out_offsets += offsets[done:]
    return out_ids, out_offsets
