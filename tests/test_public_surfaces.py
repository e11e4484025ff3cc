# SPDX-License-Identifier: MIT
"""Every public package's surface: a sorted ``__all__`` whose names resolve, type-checked strictly.

A public package is a package directory whose dotted name has no ``_``-prefixed part. Each
package's test pins its exact ``__all__`` (``tests/<package>/test_public_api.py``, mp13chat's
in ``tests/chat/test_chat_cli.py``); this file checks what holds for all of them, found
from the source tree, so a new public package or module cannot slip past. A *public module*
is a public package's ``__init__`` or a module that defines a name some ``__all__`` lists;
mypy must check each with ``--strict`` (no override in ``pyproject.toml`` relaxes it).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
TOP = ("mp13_toolbox", "mp13_engine", "mp13_context", "mp13chat")

#: Every public package, as this test expects to find them (a new one is added here).
PUBLIC_PACKAGES = (
    "mp13_context",
    "mp13_context.testing",
    "mp13_engine",
    "mp13_engine.models",
    "mp13_engine.testing",
    "mp13_engine.toolcalls",
    "mp13_toolbox",
    "mp13chat",
)

#: The flags ``--strict`` turns on; an override setting one to false relaxes a module.
STRICT_FLAGS = (
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "check_untyped_defs",
    "disallow_untyped_decorators",
    "warn_unused_ignores",
    "warn_return_any",
    "no_implicit_reexport",
    "strict_equality",
    "extra_checks",
)


def _path(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _public_packages() -> list[str]:
    found = []
    for top in TOP:
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            if not any(p.startswith("_") for p in parts):
                found.append(".".join(parts))
    return sorted(found)


def _all(module: str) -> list[str]:
    for node in ast.parse(_path(module).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements, with those inside module-level ``if`` blocks
    (``if TYPE_CHECKING:`` imports of lazily resolved names)."""
    out: list[ast.stmt] = []
    for node in tree.body:
        out.extend([node, *node.body, *node.orelse] if isinstance(node, ast.If) else [node])
    return out


def defining_module(module: str, name: str) -> str:
    """The module whose source defines ``name`` that ``module`` exports (imports followed)."""
    body = _top_level(ast.parse(_path(module).read_text(encoding="utf-8")))
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return module
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return module
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return defining_module(node.module, alias.name)
    raise AssertionError(f"{module} exports {name!r} but neither defines nor imports it")


def public_modules() -> set[str]:
    """Every public package's ``__init__`` and every module defining an exported name."""
    modules = set(PUBLIC_PACKAGES)
    for package in PUBLIC_PACKAGES:
        modules |= {defining_module(package, name) for name in _all(package)}
    return modules


def _mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def relaxed_modules(config: dict) -> dict[str, str]:
    """Module pattern -> the strict checks an override of mypy's ``config`` turns off."""
    relaxed = {}
    for override in config.get("overrides", []):
        patterns = override["module"]
        patterns = [patterns] if isinstance(patterns, str) else patterns
        off = [flag for flag in STRICT_FLAGS if override.get(flag) is False]
        if override.get("ignore_errors"):
            off.append("ignore_errors")
        for pattern in patterns:
            if off:
                relaxed[pattern] = ", ".join(off)
    return relaxed


def _matches(pattern: str, module: str) -> bool:
    if pattern.endswith(".*"):
        stem = pattern[:-2]
        return module == stem or module.startswith(stem + ".")
    return module == pattern


def test_the_public_packages_are_the_ones_listed():
    assert _public_packages() == sorted(PUBLIC_PACKAGES)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_all_is_sorted_unique_and_every_name_resolves(package):
    names = importlib.import_module(package).__all__
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    assert len(set(names)) == len(names)
    module = importlib.import_module(package)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ lists names it does not have: {missing}"


def test_every_public_module_is_type_checked_strictly():
    config = _mypy_config()
    assert config["strict"] is True
    relaxed = relaxed_modules(config)
    loose = sorted(
        f"{module} (override {pattern!r}: {why})"
        for module in public_modules()
        for pattern, why in relaxed.items()
        if _matches(pattern, module)
    )
    assert not loose, "public modules mypy does not check with --strict:\n" + "\n".join(loose)


def test_public_modules_are_found_through_re_exports():
    modules = public_modules()
    # Exported from mp13_engine but defined in the toolbox; resolved lazily (TYPE_CHECKING).
    assert defining_module("mp13_engine", "Mp13Error") == "mp13_toolbox._errors"
    assert defining_module("mp13_engine", "Engine") == "mp13_engine._engine"
    assert (
        defining_module("mp13_engine.testing", "DEMO_PROMPTS") == "mp13_engine.testing._demo_data"
    )
    assert {"mp13_engine._engine", "mp13_toolbox._toolbox", "mp13chat"} <= modules
    assert "mp13_engine._loop" not in modules  # the serving loop is internal


def test_overrides_that_relax_a_module_are_recognised():
    config = {
        "overrides": [
            {"module": ["mp13_engine.*"], "disallow_untyped_defs": False},
            {"module": "mp13chat._app", "ignore_errors": True},
            {"module": "sqlean", "ignore_missing_imports": True},
        ]
    }
    relaxed = relaxed_modules(config)
    assert relaxed == {"mp13_engine.*": "disallow_untyped_defs", "mp13chat._app": "ignore_errors"}
    assert _matches("mp13_engine.*", "mp13_engine") and _matches("a.*", "a.b.c")
    assert not _matches("mp13_engine._loop", "mp13_engine._loops")


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_class_and_function_has_its_own_docstring(package):
    # A class without one shows its base's text in help(): EventKind showed str's.
    import inspect

    def own_doc(obj: object) -> object:
        return obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__

    module = importlib.import_module(package)
    bare = [
        name
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not own_doc(obj)
    ]
    assert not bare, f"{package} exports names without a docstring of their own: {bare}"
