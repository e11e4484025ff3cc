# SPDX-License-Identifier: MIT
"""``strict_keywords``: a misspelt keyword argument to a config class becomes a typed mp13 error.

attrs' generated ``__init__`` answers ``EngineConfig(max_new_token=5)`` with Python's bare
``TypeError: __init__() got an unexpected keyword argument``: no mp13 error, no hint of
the right name. Decorating the class with ``strict_keywords(SomeKeywordError)`` (above
``@attrs.frozen``) keeps that ``__init__`` and its typed signature (mypy and ``inspect``
still see the real fields) and turns exactly that failure into ``SomeKeywordError``
naming the keyword, the closest field (``difflib``) and every valid one. The error is an
``UnknownKeywordError``, so it stays a ``TypeError`` for callers that caught that.

Cost: the valid names are computed once, when the class is decorated; a call that
binds pays one extra frame and nothing else (the check runs only after attrs' own
``TypeError``, whose other causes, a converter's or a validator's, pass through as they
are). It lives here, in the lowest layer, so every package shares the one helper.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

import attrs

from mp13_toolbox._errors import UnknownKeywordError

_C = TypeVar("_C", bound=type)


def did_you_mean(name: str, valid: Collection[str], *, cutoff: float = 0.6) -> str:
    """``" (did you mean 'x'?)"`` with the one of ``valid`` closest to ``name``, or ``""`` when
    none is close: the hint every "unknown name" message of mp13 appends to the name.

    Case and surrounding spaces do not count (``"Hermes"`` is close to ``"hermes"``);
    ``cutoff`` (difflib's, 0 to 1) is how close counts as close: raise it where a near
    name is likely another thing on purpose, not a typo."""
    folded = {v.casefold(): v for v in valid}
    close = difflib.get_close_matches(name.strip().casefold(), list(folded), n=1, cutoff=cutoff)
    return f" (did you mean {folded[close[0]]!r}?)" if close else ""


def unknown_keyword_message(
    owner: str, unknown: Iterable[str], valid: Collection[str], *, where: str | None = None
) -> str:
    """What to tell the user about ``unknown`` keywords to ``owner``: each one with the closest
    of ``valid`` (when one is close), then every valid name, then ``where`` to read more."""
    hints = [f"{name!r}{did_you_mean(name, valid)}" for name in unknown]
    words = "an unknown keyword" if len(hints) == 1 else "unknown keywords"
    more = f" (see {where})" if where else ""
    return f"{owner} got {words} {', '.join(hints)}. Valid keywords: {', '.join(valid)}{more}"


def strict_keywords(
    error: type[UnknownKeywordError], *, where: str | None = None
) -> Callable[[_C], _C]:
    """A class decorator for an attrs class: an unknown keyword raises ``error``.

    Put it above the attrs decorator. ``where`` names the documentation the message points
    to (``help(<the class>)`` by default).
    """

    def decorate(cls: _C) -> _C:
        valid = tuple(a.alias for a in attrs.fields(cls) if a.init)
        names = frozenset(valid)
        owner = cls.__name__
        docs = where or f"help({owner})"
        init: Callable[..., None] = vars(cls)["__init__"]  # attrs' own, generated one

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except TypeError as exc:
                unknown = [k for k in kwargs if k not in names]
                if not unknown:  # a converter's or validator's TypeError, or a positional one
                    raise
                raise error(unknown_keyword_message(owner, unknown, valid, where=docs)) from exc

        setattr(cls, "__init__", __init__)  # noqa: B010 (mypy rejects assigning a method)
        return cls

    return decorate
