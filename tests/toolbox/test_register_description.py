# SPDX-License-Identifier: MIT
"""A function tool without a description is registered with a ``ToolDescriptionWarning``.

The description (a docstring's first paragraph, or ``register(description=...)``) is
what a model reads to choose a tool and to call it right. A function without a
docstring was advertised with ``"description": ""`` and nothing said so: a forgotten
docstring showed up only as a model that would not use the tool. Registration now
warns, naming the tool, at the line that registered it; the tool is still registered
as it was, and ``description=""`` says "empty on purpose".
"""

from __future__ import annotations

import warnings

import pytest

from mp13_toolbox import Toolbox, ToolCall, ToolDescriptionWarning


def _no_doc(x: int) -> int:
    return x


def _args_only(x: int) -> int:
    """Args:
    x: a number
    """
    return x


def _described(x: int) -> int:
    """Return ``x``."""
    return x


@pytest.mark.parametrize("func", [_no_doc, _args_only])
def test_a_function_without_a_description_warns_and_is_still_registered(func):
    tb = Toolbox()
    with pytest.warns(ToolDescriptionWarning, match=rf"tool '{func.__name__}' has no desc") as w:
        tb.register(func)
    (warning,) = w.list
    assert warning.filename == __file__  # points at the register() call, not mp13's code
    assert "docstring" in str(warning.message) and "description=" in str(warning.message)
    # the tool works as before, advertised with the empty description
    (spec,) = tb.specs()
    assert spec["function"]["description"] == ""
    assert tb.execute(ToolCall(func.__name__, {"x": 2}), tb.view()).content == "2"


def test_the_decorator_forms_warn_at_the_decorated_function():
    tb = Toolbox()
    with pytest.warns(ToolDescriptionWarning) as w:

        @tb.register
        def plain(x: int) -> int:
            return x

        @tb.register(risk="high", name="renamed")
        def with_options(x: int) -> int:
            return x

    assert [str(x.message).split(" has")[0] for x in w.list] == [
        "tool 'plain'",
        "tool 'renamed'",
    ]
    assert {x.filename for x in w.list} == {__file__}
    assert tb.names() == ["plain", "renamed"]


@pytest.mark.parametrize(
    ("func", "options", "description"),
    [
        (_described, {}, "Return ``x``."),
        (_no_doc, {"description": "Echo a number."}, "Echo a number."),
        (_no_doc, {"description": ""}, ""),  # empty on purpose
    ],
)
def test_a_described_tool_or_an_explicit_description_does_not_warn(func, options, description):
    tb = Toolbox()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tb.register(func, **options)
    assert tb.specs()[0]["function"]["description"] == description


def test_builtins_and_external_specs_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tb = Toolbox(builtins=True)
        spec = {"name": "ext", "parameters": {"type": "object", "properties": {}}}
        tb.register_external(spec, lambda call: "ok")  # its author wrote the spec itself
    assert "ext" in tb.names() and len(tb.names()) > 1


def test_the_warning_can_be_silenced_by_its_category():
    tb = Toolbox()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=ToolDescriptionWarning)
        tb.register(_no_doc)
    assert tb.names() == ["_no_doc"]
