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
"""

from __future__ import annotations

import re
import unicodedata

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
