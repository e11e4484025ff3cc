# SPDX-License-Identifier: MIT
"""Text the store can keep and search: lone surrogates and plain-word queries.

Invariants:

- What the session stores is valid UTF-8. A *lone surrogate* (a code point
  U+D800..U+DFFF on its own: Python decodes an undecodable byte of a file name
  as one, e.g. ``os.listdir`` on a non-UTF-8 system) cannot be encoded, so the
  session stores U+FFFD (the replacement character) in its place, as
  ``bytes.decode(errors="replace")`` would show it. Everything else, NUL and
  other control characters included, is kept as it is.
- A plain-word query never raises (see ``fts_query``).
- Words of scripts written without spaces between words (``unspaced``: Han, kana,
  Hangul, Thai, Lao, Myanmar, Khmer) are found as substrings (``unspaced_pieces``),
  since the word index keeps a whole run of such characters as one token.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from mp13_context._errors import ContextError

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _SURROGATE.sub(REPLACEMENT, text)


def text_arg(value: object, what: str) -> str:
    """A caller's title or label, scrubbed; ``ContextError`` if it is not a string."""
    if not isinstance(value, str):
        raise ContextError(f"{what} must be a string, not {type(value).__name__}")
    return scrub(value)


def _plain(word: str) -> str:
    # Inside an FTS5 string only '"' is special (doubled), but the query parser reads
    # C strings, so NUL would end the query early; control characters are token
    # separators for the index anyway, so they become spaces.
    chars = [" " if unicodedata.category(c) == "Cc" else c for c in scrub(word)]
    return "".join(chars).replace('"', '""')


def fts_query(text: str) -> str:
    """Plain words -> an FTS5 query that matches all of them, with no operators.

    ``text`` is split at whitespace into words and a hit contains every word.
    Each word is matched the way the index reads text: letters and digits form
    tokens (case-insensitive), everything else (punctuation, quotes, FTS5
    syntax, control characters, NUL) separates them. A word with several tokens
    (``e-mail``, ``a\\x00b``) matches them next to each other, as a phrase; a word
    without a letter or digit (``!!``) matches anywhere, so it does not narrow
    the search; a query of such words only matches nothing.
    """
    return " ".join(f'"{_plain(w)}"' for w in text.split())


#: Characters of scripts written without spaces between words: FTS5's ``unicode61``
#: tokenizer keeps a run of them as one token, so ``日本語`` is not a word of
#: ``日本語のテキスト`` there. Han (with extensions and compatibility forms), kana,
#: Hangul, Thai, Lao, Myanmar and Khmer.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3040-\u30ff"
    "\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


def unspaced(text: str) -> bool:
    """Whether ``text`` has a character of a script written without spaces (``_UNSPACED``)."""
    return _UNSPACED.search(text) is not None


def unspaced_pieces(word: str) -> list[str]:
    """The substrings a search word of such a script must find: its runs of letters,
    marks and digits (punctuation, symbols, spaces and control characters separate them,
    as they separate tokens in the word index)."""
    chars = [c if unicodedata.category(c)[0] in "LMN" else " " for c in scrub(word)]
    return "".join(chars).split()


def substring_snippet(text: str, pieces: Sequence[str], around: int = 24) -> str:
    """A snippet of ``text`` around the first of ``pieces`` it holds (case-insensitive),
    ``around`` characters each side, every piece in it marked ``[...]`` and a cut end
    shown as ``…``, like the word index's snippets. "" if it holds none."""
    found = re.compile("|".join(map(re.escape, pieces)), re.IGNORECASE)
    first = found.search(text)
    if first is None:
        return ""
    start, end = max(0, first.start() - around), min(len(text), first.end() + around)
    marked = found.sub(lambda m: f"[{m.group()}]", text[start:end])
    return ("…" if start else "") + marked + ("…" if end < len(text) else "")
