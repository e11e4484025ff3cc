# SPDX-License-Identifier: MIT
"""``strict_keywords``: a misspelt keyword to a settings class is a typed error with a hint."""

from __future__ import annotations

import inspect

import attrs
import pytest

import mp13_toolbox
from mp13_toolbox import (
    Mp13Error,
    ToolBudget,
    ToolSettingError,
    ToolSettingKeywordError,
    ToolsScope,
    UnknownKeywordError,
    did_you_mean,
    strict_keywords,
)


@pytest.mark.parametrize(
    ("build", "typo", "suggestion"),
    [
        (lambda: ToolBudget(max_call=3), "max_call", "max_calls"),
        (lambda: ToolBudget(max_round=1), "max_round", "max_rounds"),
        (lambda: ToolsScope({"*": "silent"}, lable="x"), "lable", "label"),
    ],
)
def test_a_misspelt_setting_names_it_and_the_field_meant(build, typo, suggestion):
    with pytest.raises(ToolSettingKeywordError) as caught:
        build()
    message = str(caught.value)
    assert f"{typo!r} (did you mean {suggestion!r}?)" in message
    assert "Valid keywords:" in message
    # One error, caught as the toolbox's setting error, as mp13's and as what Python raised.
    for kind in (ToolSettingError, UnknownKeywordError, Mp13Error, TypeError, ValueError):
        assert isinstance(caught.value, kind)


def test_typeerror_still_catches_it():
    with pytest.raises(TypeError, match="did you mean 'max_calls'"):
        ToolBudget(max_call=3)


def test_every_valid_name_is_listed_and_a_far_name_gets_no_guess():
    with pytest.raises(ToolSettingKeywordError) as caught:
        ToolBudget(zzz=1)
    message = str(caught.value)
    assert "did you mean" not in message
    assert "max_calls, max_rounds, max_repeats" in message
    assert "help(ToolBudget)" in message


def test_the_constructors_still_work_and_keep_their_signatures():
    assert ToolBudget(max_calls=3).max_calls == 3
    assert ToolsScope({"*": "silent"}, label="x").label == "x"
    assert list(inspect.signature(ToolBudget).parameters) == [
        "max_calls",
        "max_rounds",
        "max_repeats",
    ]
    assert attrs.evolve(ToolBudget(), max_rounds=2).max_rounds == 2


@attrs.frozen(kw_only=True)
class _Inner:
    size: int = attrs.field(default=1, converter=int)
    _private: str = ""


@strict_keywords(ToolSettingKeywordError, where="the docs of _Shape")
@attrs.frozen(kw_only=True)
class _Shape:
    size: int = attrs.field(default=1, converter=int)
    _private: str = ""


def test_other_type_errors_pass_through_unchanged():
    # A converter's TypeError (int(None)) is not about a keyword: left as it was.
    with pytest.raises(TypeError) as caught:
        _Shape(size=None)
    assert not isinstance(caught.value, UnknownKeywordError)
    with pytest.raises(TypeError) as caught:
        _Shape(1)  # a positional argument to a keyword-only class
    assert not isinstance(caught.value, UnknownKeywordError)


def test_several_unknown_names_an_alias_and_where_to_read():
    assert _Shape(private="p")._private == "p"  # attrs' alias of a private field is valid
    with pytest.raises(UnknownKeywordError) as caught:
        _Shape(sise=2, colour="red")
    message = str(caught.value)
    assert message.startswith("_Shape got unknown keywords 'sise' (did you mean 'size'?)")
    assert "'colour'" in message
    assert "Valid keywords: size, private (see the docs of _Shape)" in message
    # The plain class, without the decorator, still raises attrs' bare TypeError.
    with pytest.raises(TypeError) as plain:
        _Inner(sise=2)
    assert not isinstance(plain.value, Mp13Error)


def test_it_is_public():
    assert mp13_toolbox.strict_keywords is strict_keywords
    assert issubclass(UnknownKeywordError, TypeError)


def test_did_you_mean_names_the_closest_valid_name_or_nothing():
    assert did_you_mean("max_call", ["max_calls", "max_rounds"]) == " (did you mean 'max_calls'?)"
    assert did_you_mean("zzz", ["max_calls", "max_rounds"]) == ""
