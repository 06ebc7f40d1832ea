"""The house rules, checked on the code: imports flow one way between the layers, no
import cycle, no module over 400 lines, no package face with code of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mgpu_dask

ROOT = Path(mgpu_dask.__file__).parent
LAYERS = [("cli", "run"), ("jobs",), ("compare",), ("knn", "logreg"),
          ("parallel", "cluster", "data"), ("kernels",), ("config", "exceptions")]
"""From the top down: a module may import its own layer's packages (without a cycle) and
the layers below it, never one above."""
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("mgpu_dask", *parts))] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports (a package's face counts as the package)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != name}


def _room(module: str) -> str:
    """The top-level entry of the package a module belongs to (``knn``, ``cli``, ...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mgpu_dask"


def test_imports_flow_down_the_layers():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        room = _room(name)
        if room == "mgpu_dask":
            continue  # the package's face re-exports the public API, lazily
        for target in _imports(name, path, modules):
            if _room(target) != "mgpu_dask" and LEVEL[_room(target)] < LEVEL[room]:
                upward.append(f"{name} -> {target}")
    assert not upward, upward


def test_no_import_cycle():
    modules = _modules()
    graph = {name: {t for t in _imports(name, path, modules) if not modules[t].name == "__init__.py"}
             for name, path in modules.items() if path.name != "__init__.py"}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


@pytest.mark.parametrize("limit", [400])
def test_modules_stay_small_and_faces_hold_no_code(limit):
    too_long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
                if (n := len(p.read_text().splitlines())) > limit}
    assert not too_long, too_long
    for face in ROOT.rglob("__init__.py"):
        tree = ast.parse(face.read_text())
        defined = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                   and n.name != "__getattr__"]
        assert not defined, f"{face.relative_to(ROOT)} defines {defined}: a face re-exports"


def test_no_measured_history_in_the_code():
    """Which round found what, and figures per machine, belong in docs/performance-history.md."""
    import re

    pattern = re.compile(r"\b[Rr]ound ?[0-9]+|H200|H100|benchmarks/results")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
