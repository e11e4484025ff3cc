# SPDX-License-Identifier: MIT
"""The public surface of mp13_toolbox is pinned: sorted ``__all__``, names importable."""

import mp13_toolbox


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
    group = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return group, name


def test_all_is_sorted_and_importable():
    names = mp13_toolbox.__all__
    assert names == sorted(names, key=_isort_key)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(mp13_toolbox, name) is not None


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
        "BudgetState",
        "ToolboxState",
        "Mp13Error",
    }
    assert required <= set(mp13_toolbox.__all__)


def test_errors_belong_to_the_one_tree():
    for name in ("ToolboxError", "ToolRegistrationError", "UnknownToolError", "ToolStateError"):
        assert issubclass(getattr(mp13_toolbox, name), mp13_toolbox.Mp13Error)
