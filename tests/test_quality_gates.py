# SPDX-License-Identifier: MIT
"""The quality gates run as one command (STYLE 12): the README's, which ``.ci/run`` runs.

The type checker is part of it: ``mypy`` with the settings in ``pyproject.toml``,
``--strict`` on every module but a few internal ones listed there (which public
modules never are: ``tests/test_public_surfaces.py``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the gates themselves need no TOML

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mp13_toolbox", "mp13_engine", "mp13_context", "mp13chat")


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block, "the README opens with a bash block of set-up commands"
    lines = block.group(1).strip().splitlines()
    assert len(lines) == 2, "the set-up block holds the install command and the test command"
    return lines[1]


def _mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def _module_exists(name: str) -> bool:
    path = ROOT.joinpath(*name.removesuffix(".*").split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_test_command()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == command
    assert "ruff check ." in command and "python -m pytest" in command


def test_the_test_command_type_checks_what_pyproject_configures():
    assert " mypy " in f" {_readme_test_command()} "  # bare: it reads [tool.mypy]
    config = _mypy_config()
    assert sorted(config["files"]) == sorted(PACKAGES)
    assert config["strict"] is True


def test_mp13_toolbox_is_strict_and_every_override_names_a_real_module():
    """No override relaxes the toolbox, and no override outlives its module."""
    for override in _mypy_config()["overrides"]:
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        ours = [m for m in modules if m.split(".")[0] in PACKAGES]
        assert not [m for m in ours if m.split(".")[0] == "mp13_toolbox"], override
        missing = [m for m in ours if not _module_exists(m)]
        assert not missing, f"mypy overrides name modules that do not exist: {missing}"


@pytest.mark.slow
def test_mypy_passes():
    """What the README's command runs (about 30 s without mypy's cache)."""
    out = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
