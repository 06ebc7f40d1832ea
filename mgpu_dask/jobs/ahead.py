"""A first run's kernels, compiled side by side while the cluster starts.

The workers' warm-up (:mod:`.warmup`) compiles what a job uses one kernel after
another, once the cluster is up.  For the jobs' usual kinds of run, the kernels
their warm-ups ask for are listed in ``ahead.json`` (made on a GPU by
``python -m mgpu_dask.jobs.ahead --record``): Numba's by argument types,
CuPy's by source.  :func:`start` hands a run's list to several processes
(:class:`~mgpu_dask.kernels.ahead.Compiling`) the moment the command starts, so
the compiles overlap each other and the cluster's start, and the warm-up then
loads them from the caches.  A run whose kind is not listed, or whose caches
are known to hold it already, starts nothing here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from .. import __version__

LIST = Path(__file__).with_name("ahead.json")
PROCESSES = 6
"""Compiling processes at most (each first imports Numba and CuPy and makes a context)."""


def key(spec: dict[str, Any]) -> str:
    """A run's kind as ``ahead.json`` lists it: its warm-up spec, fields sorted."""
    return json.dumps({k: v for k, v in sorted(spec.items()) if k != "gpu"}, sort_keys=True)


def _listed() -> dict[str, Any]:
    try:
        return json.loads(LIST.read_text())
    except (OSError, ValueError):
        return {}


def _stamp(spec: dict[str, Any]) -> Path | None:
    """The file that says this kind of run's kernels are all in the caches (written after
    a warm-up that compiled nothing), or None where the caches are not named."""
    numba, cupy = os.environ.get("NUMBA_CACHE_DIR"), os.environ.get("CUPY_CACHE_DIR")
    if not numba or not cupy:
        return None
    mark = hashlib.sha1("\0".join((key(spec), __version__, cupy)).encode()).hexdigest()[:16]
    return Path(numba) / "mgpu-dask-ready" / mark


def mark_ready(spec: dict[str, Any]) -> None:
    """Note that a warm-up of ``spec``'s kind compiled nothing: the next run starts no
    compiling processes."""
    stamp = _stamp(spec)
    if stamp is not None and not stamp.exists():
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(key(spec) + "\n")
        except OSError:
            pass  # a read-only cache: the next run checks again


def items_for(spec: dict[str, Any], cupy_version: str | None) -> list[dict[str, Any]]:
    """The kernels ``ahead.json`` lists for ``spec``'s kind ([] where none); CuPy's only
    where they were recorded with the CuPy version installed (its sources differ)."""
    listed = _listed()
    items = listed.get("runs", {}).get(key(spec), [])
    if listed.get("cupy") != cupy_version:
        items = [item for item in items if "cupy" not in item]
    return items


def _cupy_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("cupy", "cupy-cuda13x", "cupy-cuda12x"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def start(spec: dict[str, Any], say: Callable[[str], None]) -> Any:
    """Start compiling ``spec``'s listed kernels (a :class:`Compiling`), or None: nothing
    listed, or the caches hold them already.  ``say`` gets one line when the first
    kernel starts to compile."""
    stamp = _stamp(spec)
    if stamp is None or stamp.exists():
        return None
    items = items_for(spec, _cupy_version())
    if not items:
        return None
    from ..kernels.ahead import Compiling

    where = os.environ.get("NUMBA_CACHE_DIR")
    return Compiling(items, min(PROCESSES, max(1, (os.cpu_count() or 2) // 2)),
                     on_first_compile=lambda: say(
                         "compiling our CUDA kernels, first run on this machine: cached in "
                         f"{where} for next time"))


def _record_one(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """In this process (empty caches): the kernels ``spec``'s warm-up asks for."""
    import importlib

    from ..kernels.ahead import Recorder
    from .warmup import WORKER_MODULES

    module = importlib.import_module(WORKER_MODULES[spec["task"]])
    fields = {k: v for k, v in spec.items() if k != "task"}
    with Recorder() as recorder:
        module.warm_up(gpu=True, **fields)
    return recorder.items


def record(specs: list[dict[str, Any]]) -> dict[str, Any]:
    """``ahead.json``'s content for ``specs``: each recorded in a process of its own with
    empty caches (so every kernel is asked for, and timed, as a first run does)."""
    runs = {}
    for spec in specs:
        env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="numba."),
                   CUPY_CACHE_DIR=tempfile.mkdtemp(prefix="cupy."))
        out = subprocess.run([sys.executable, "-m", "mgpu_dask.jobs.ahead", "--record-one",
                              json.dumps(spec)],
                             env=env, capture_output=True, text=True, check=True)
        runs[key(spec)] = json.loads(out.stdout.strip().splitlines()[-1])
    return {"cupy": _cupy_version(), "runs": runs}


def usual_specs() -> list[dict[str, Any]]:
    """The kinds of run ``ahead.json`` lists: ``knn`` and ``logreg`` as the command line
    runs them by default, on MNIST-like data (uint8 or float32 rows), and ``logreg`` on
    deformed MNIST (shards large enough for the one-pass evaluation)."""
    from .warmup import knn_spec, logreg_spec

    specs = []
    for dtype in ("uint8", "float32"):
        specs.append(knn_spec(dtype=dtype, dataset=None, precision="auto", method="gemm", k=3,
                              weights="distance", plan="auto", workers=None))
        specs.append(logreg_spec(dtype=dtype, dataset=None, precision="auto", classes=None,
                                 optimizer="auto"))
    specs.append(logreg_spec(dtype="uint8", dataset="mnist-deformed", precision="auto",
                             classes=None, optimizer="auto"))
    return specs


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record-one"]:
        print(json.dumps(_record_one(json.loads(argv[1]))))
        return 0
    if argv[:1] == ["--record"]:
        out = Path(argv[1]) if len(argv) > 1 else LIST
        out.write_text(json.dumps(record(usual_specs()), indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    print("usage: python -m mgpu_dask.jobs.ahead --record [FILE]  (on a machine with a GPU)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
