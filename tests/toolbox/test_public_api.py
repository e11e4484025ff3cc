# SPDX-License-Identifier: MIT
"""The public surface of mp13_toolbox is pinned: the exact ``__all__``."""

import pytest

import mp13_toolbox


def test_names_are_pinned():
    assert mp13_toolbox.__all__ == [
        "BUILTINS",
        "DEFAULT_APPROVALS",
        "TRUNCATION_MARKER",
        "Approval",
        "ApprovalAnswer",
        "ApprovalRequest",
        "Approver",
        "BudgetTracker",
        "CalculatorError",
        "Mp13Error",
        "Risk",
        "ToolBudget",
        "ToolCall",
        "ToolContext",
        "ToolDescriptionWarning",
        "ToolInfo",
        "ToolKind",
        "ToolMode",
        "ToolRecord",
        "ToolRegistrationError",
        "ToolResult",
        "ToolSettingError",
        "ToolSettingKeywordError",
        "ToolSnapshotError",
        "ToolSpec",
        "Toolbox",
        "ToolboxError",
        "ToolboxSnapshot",
        "ToolsScope",
        "ToolsView",
        "UnknownKeywordError",
        "UnknownToolError",
        "did_you_mean",
        "function_spec",
        "parse_docstring",
        "plural",
        "resolve_ref",
        "strict_keywords",
        "validate",
    ]


def test_contract_names_of_api_md_are_exported():
    required = {
        "Toolbox",
        "ToolSpec",
        "ToolCall",
        "ToolResult",
        "ToolsScope",
        "ToolsView",
        "ToolMode",
        "ToolBudget",
        "BudgetTracker",
        "ToolboxSnapshot",
        "Mp13Error",
    }
    assert required <= set(mp13_toolbox.__all__)


def test_errors_belong_to_the_one_tree():
    names = (
        "ToolboxError",
        "ToolRegistrationError",
        "UnknownToolError",
        "ToolSettingError",
        "ToolSnapshotError",
        "CalculatorError",
    )
    for name in names:
        assert issubclass(getattr(mp13_toolbox, name), mp13_toolbox.ToolboxError)
    assert issubclass(mp13_toolbox.ToolboxError, mp13_toolbox.Mp13Error)


def test_one_base_for_every_package():
    """The engine, context and REPL errors share the toolbox's public ``Mp13Error``."""
    import mp13_context
    import mp13_engine
    import mp13chat._errors

    assert mp13_engine.Mp13Error is mp13_toolbox.Mp13Error
    for base in (mp13_engine.EngineError, mp13_context.ContextError, mp13chat._errors.ChatError):
        assert issubclass(base, mp13_toolbox.Mp13Error)


@pytest.mark.parametrize(
    "bad_setting",
    [
        lambda: mp13_toolbox.Toolbox().register(lambda: None, name="f", risk="extreme"),
        lambda: mp13_toolbox.Toolbox(approval_defaults={"low": "sometimes"}),
        lambda: mp13_toolbox.Toolbox().set_approval_default("low", None),
        lambda: mp13_toolbox.Toolbox(builtins=["calculator"]).remember("calculator", "yes"),
        lambda: mp13_toolbox.Toolbox(builtins=["calculator"]).remember("calculator", "maybe"),
        lambda: mp13_toolbox.Toolbox(builtins=["calculator"]).set_mode("calculator", "hidden"),
        lambda: mp13_toolbox.ToolsScope({"": "silent"}),
        lambda: mp13_toolbox.ToolBudget(max_rounds=-1),
    ],
)
def test_a_bad_setting_is_a_tool_setting_error_and_still_a_value_error(bad_setting):
    with pytest.raises(mp13_toolbox.ToolSettingError) as caught:
        bad_setting()
    assert isinstance(caught.value, mp13_toolbox.Mp13Error)
    assert isinstance(caught.value, ValueError)  # what callers caught before


def test_calculator_refusals_are_toolbox_errors():
    from mp13_toolbox._builtins import calculator

    with pytest.raises(mp13_toolbox.CalculatorError) as caught:
        calculator("1/0")
    assert isinstance(caught.value, mp13_toolbox.Mp13Error)
    assert isinstance(caught.value, ValueError)
