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


# -- the house around the code: the README, benchmarks/ and the history stay small -------------
REPO = ROOT.parent
README_LINES, HISTORY_LINES, BENCHMARK_SCRIPTS, BENCHMARKS_README_LINES = 200, 500, 10, 120
BENCHMARK_TOOLS = {"README.md", "device.sh", "summarize.py", "results"}
"""benchmarks/ entries that are not a table's script."""


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_readme_and_history_stay_short():
    assert _lines(REPO / "README.md") <= README_LINES, "README.md: results go to docs/results.md"
    assert _lines(REPO / "docs" / "performance-history.md") <= HISTORY_LINES, \
        "performance-history.md: one short paragraph per idea"
    assert _lines(REPO / "benchmarks" / "README.md") <= BENCHMARKS_README_LINES


def test_benchmarks_hold_one_script_per_table():
    scripts = sorted(p.name for p in (REPO / "benchmarks").iterdir()
                     if p.name not in BENCHMARK_TOOLS and p.suffix in (".py", ".sh"))
    assert len(scripts) <= BENCHMARK_SCRIPTS, f"finished probes leave the tree (git keeps them): {scripts}"
    text = (REPO / "benchmarks" / "README.md").read_text()
    unexplained = [s for s in scripts if s not in text]
    assert not unexplained, f"benchmarks/README.md says nothing of {unexplained}"


def _documents() -> str:
    return "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                                             REPO / "benchmarks" / "README.md"])


def test_every_results_folder_is_cited_and_every_cited_folder_exists():
    import re

    text = _documents()
    folders = {p.name for p in (REPO / "benchmarks" / "results").iterdir() if p.is_dir()}
    uncited = sorted(f for f in folders if f not in text)
    assert not uncited, f"results folders no page cites (git keeps them): {uncited}"
    # a folder of a commit named bare (``floor-runs-1xH200-80c84bf/``); one read from an
    # older commit is written with its path (``results/...``) or a ``git show``
    named = set(re.findall(r"(?<![\w/.-])([a-z][\w.-]*?-\d+xH\d+-[0-9a-f]{7})(?![\w-])", text))
    missing = sorted(n for n in named if n not in folders)
    assert not missing, f"pages cite results folders that are not in the tree: {missing}"
