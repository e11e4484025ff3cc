# SPDX-License-Identifier: MIT
"""The layering rules of DESIGN.md: imports only go down, and no package imports in a circle.

The cycle check reads every module's source with ``ast`` (nothing is imported or
run), so it sees every import a module can make: at module level, inside
functions, and under ``TYPE_CHECKING`` (a type checker follows those too, and a
cycle there is a design cycle even when Python never runs it).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mp13_toolbox", "mp13_engine", "mp13_context", "mp13chat")


def test_toolbox_and_context_do_not_import_torch():
    code = (
        "import sys, mp13_toolbox, mp13_context, mp13_engine; "
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_toolbox_imports_nothing_of_ours():
    code = (
        "import sys, mp13_toolbox; "
        "print(','.join(m for m in sys.modules if m.split('.')[0] in "
        "('mp13_engine', 'mp13_context', 'mp13chat')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _private(target: str) -> bool:
    """Whether a dotted import target passes through a ``_private`` module or name."""
    return any(part.startswith("_") for part in target.split(".")[1:])


@pytest.mark.parametrize("package", PACKAGES)
def test_other_packages_are_imported_through_their_public_modules(package):
    """``Mp13Error`` and the rest come from ``mp13_toolbox``, never ``mp13_toolbox._errors``."""
    reach_ins = []
    for name, path in _modules(package).items():
        for node, target in _targets(name, path, _parse(path)):
            top = target.split(".")[0]
            if top in PACKAGES and top != package and _private(target):
                reach_ins.append(f"{name} imports {target} (line {node.lineno})")
    assert not reach_ins, "private modules of another package:\n" + "\n".join(reach_ins)


# --- import cycles ------------------------------------------------------------------------


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``package`` (subpackages too)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of ``modules``."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _reexported(node: ast.ImportFrom, exported: set[str]) -> bool:
    """An ``__init__``'s ``from x import a, b`` whose names are all in its ``__all__``."""
    return all((alias.asname or alias.name) in exported for alias in node.names)


def _all_names(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            return set(value)
    return set()


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _targets(name: str, path: Path, tree: ast.Module) -> list[tuple[ast.stmt, str]]:
    """Every ``(import statement, dotted name it imports)`` in module ``name`` (``tree``).

    Relative imports are made absolute; ``from pkg import x`` yields ``pkg.x``
    (which may name a submodule or an attribute).
    """
    out: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            out.extend((node, f"{base}.{alias.name}") for alias in node.names)
    return out


def import_edges(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, from the source alone.

    Counts every ``import`` and ``from ... import`` anywhere in a module (module
    level, functions, ``TYPE_CHECKING`` blocks), relative or absolute.
    ``from pkg import name`` is an edge to the submodule ``pkg.name`` when there is
    one, else to ``pkg`` itself (its ``__init__``). An ``__init__``'s re-exports
    (module-level imports of names it lists in ``__all__``) are its public surface,
    not a dependency, and are left out; its other imports count.
    """
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = _parse(path)
        reexports: set[int] = set()
        if path.name == "__init__.py":
            exported = _all_names(tree)
            reexports = {
                id(node)
                for node in tree.body
                if isinstance(node, ast.ImportFrom) and _reexported(node, exported)
            }
        for node, target in _targets(name, path, tree):
            found = _known(target, modules)
            if id(node) not in reexports and found is not None and found != name:
                graph[name].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One closed import path through ``component``, for the failure message."""
    members = set(component)
    start = component[0]
    # Breadth-first from start back to start, inside the component.
    paths = {succ: [start, succ] for succ in sorted(graph[start]) if succ in members}
    queue = list(paths)
    while queue:
        node = queue.pop(0)
        if start in graph[node]:
            return [*paths[node], start]
        for succ in sorted(graph[node]):
            if succ in members and succ not in paths:
                paths[succ] = [*paths[node], succ]
                queue.append(succ)
    return component


@pytest.mark.parametrize(
    "package",
    [
        "mp13_toolbox",
        "mp13_engine",
        "mp13_context",
        "mp13chat",
    ],
)
def test_no_import_cycle_inside_a_package(package):
    graph = import_edges(package)
    found = cycles(graph)
    described = [
        f"{' -> '.join(_loop(graph, c))} (modules in the cycle: {', '.join(c)})" for c in found
    ]
    assert not found, f"{package} imports in a circle:\n" + "\n".join(described)


def test_cycle_check_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The checker counts function-level, TYPE_CHECKING, relative and package imports."""
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from demo._a import A\n__all__ = ['A']\n",
        "_a.py": "def f():\n    from demo import _b\n",
        "_b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import _c\n",
        "_c.py": "from .sub import helper\n",
        "sub/__init__.py": "from .._a import A\n",
        "sub/helper.py": "",
        "_d.py": "import demo\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_edges("demo")
    assert graph == {
        "demo": set(),  # a re-export is not an edge
        "demo._a": {"demo._b"},
        "demo._b": {"demo._c"},
        "demo._c": {"demo.sub.helper"},
        "demo._d": {"demo"},
        "demo.sub": {"demo._a"},  # not re-exported (no __all__): a real import
        "demo.sub.helper": set(),
    }
    assert cycles(graph) == []
    graph["demo.sub.helper"].add("demo.sub")
    assert cycles(graph) == [["demo._a", "demo._b", "demo._c", "demo.sub", "demo.sub.helper"]]
    loop = _loop(graph, cycles(graph)[0])
    assert loop[0] == loop[-1] == "demo._a" and len(loop) == 6
