"""The Python core imports in one direction: no import circle between ms_grad_ops modules.

Two checks. (1) The module import graph, read with ``ast`` from the package sources, counting every
``import``/``from ... import`` statement wherever it stands (module level or inside a function, where
a circle would otherwise hide), is acyclic. (2) Each module imports on its own in a fresh interpreter,
so no module depends on another having been imported first.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import ms_grad_ops

PACKAGE_DIR = Path(ms_grad_ops.__file__).resolve().parent
PACKAGE = "ms_grad_ops"


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} of every .py file (``__init__`` = the package) and compiled
    extension (a leaf: it imports no module of the package) of the package."""
    names = {}
    for path in sorted(package_dir.rglob("*")):
        suffix = next((s for s in (".py", *EXTENSION_SUFFIXES) if path.name.endswith(s)), None)
        if suffix is None or not path.is_file():
            continue
        parts = path.relative_to(package_dir).parts
        parts = (*parts[:-1], path.name[:-len(suffix)])
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package_dir: Path, package: str) -> dict[str, set[str]]:
    """{module: modules of the package it imports} over every import statement of each source. ``from X
    import n`` counts as importing ``X.n`` when that is a module of the package, else ``X``."""
    modules = module_names(package_dir, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        if path.suffix != ".py":
            continue
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as [m0, m1, ..., m0], or None when it is acyclic."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_package_import_graph_is_acyclic() -> None:
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    # The scan must see the modules and edges that matter, or an empty graph would pass.
    assert {"ms_grad_ops._custom", "ms_grad_ops._bprops", "ms_grad_ops._checks"} <= set(graph)
    assert "ms_grad_ops._bprops" in graph["ms_grad_ops._custom"]
    assert "ms_grad_ops._custom" in graph["ms_grad_ops._checks"]
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph) or [])}"


def test_nn_imports_no_private_ops_module() -> None:
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    bad = {(m, t) for m, ts in graph.items() if m.startswith("ms_grad_ops.nn") for t in ts
           if t.startswith("ms_grad_ops.ops._")}
    assert bad == set(), "nn/ imports only public ops or package-level helpers"


def test_cycle_finder_sees_a_circle_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import g\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from .. import a\n    return a\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (pkg / "sub" / "b.py").write_text("def g():\n    return 1\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None


def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    # Python modules only: _cpu_kernels is a kernel library loaded by path, not an importable module.
    names = sorted(n for n, path in module_names(PACKAGE_DIR, PACKAGE).items() if path.suffix == ".py")
    env = {**os.environ, "GLOG_v": "3"}
    failures = []
    # Two at a time: every interpreter imports MindSpore.
    for i in range(0, len(names), 2):
        procs = [(n, subprocess.Popen([sys.executable, "-P", "-c", f"import {n}"], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env)) for n in names[i:i + 2]]
        for name, proc in procs:
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                failures.append(f"{name}:\n{out[-2000:]}")
    assert not failures, "\n".join(failures)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
