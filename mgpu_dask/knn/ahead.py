"""A first predict's Numba kernels, compiled in side processes while the fit runs.

On a machine whose kernel cache lacks them, a KNN fit's first predict compiled its Numba
kernels one after another in the worker (about a second each: the queries' operand, the
exact re-rank, the packing and the vote), after the fit had ended.  Where the estimator
finds the cache without them (``parallel.first_use``), it asks one GPU worker of each host
to start :func:`compile_ahead`: a few short-lived processes
(:class:`~mgpu_dask.kernels.ahead.Compiling`) compile them into the host's cache, side by
side and beside the fit, and the first predict loads what they finished.

The kernels are named by the argument types their launches give Numba (CuPy arrays,
C-contiguous, scalars as int64 and float64), as ``jobs/ahead.json`` names the MNIST
jobs' kernels.  Runs on the workers; imports no scikit-learn.
"""

from __future__ import annotations

import threading
from typing import Any

from .warmup import Search

PROCESSES = 4
"""Side processes at most (each first imports Numba)."""
_F64_2D, _I32_2D, _F32_2D = "array(float64, 2d, C)", "array(int32, 2d, C)", "array(float32, 2d, C)"
_F64_1D = "array(float64, 1d, C)"
SIGNATURES = {
    "mgpu_dask.kernels.knn.cuda_rows:pack_rows": (
        [_F64_2D, _I32_2D, "array(int32, 1d, C)", "array(int64, 1d, C)", "int64",
         "array(float64, 3d, C)"], 0.5),
    "mgpu_dask.kernels.knn.cuda_rows:half_query_rows": (
        [_F32_2D, _F64_1D, "int64", "float64", "float64", "int64", "int64", "int64",
         "array(uint16, 2d, C)", "array(bool, 1d, C)", _F64_1D, _F64_1D, _F64_1D], 0.8),
    "mgpu_dask.kernels.knn.cuda_rows:refine_rows_short": (
        [_F32_2D, _F32_2D, _I32_2D, "int64", "int64", _F64_2D, _I32_2D], 1.0),
    "mgpu_dask.kernels.knn.cuda:refine_rows": (
        [_F32_2D, _F32_2D, _I32_2D, "int64", "int64", _F64_2D, _I32_2D], 1.5),
    "mgpu_dask.kernels.knn.cuda:vote_rows": (
        ["array(float64, 3d, C)", "int64", "bool", _F64_2D, "array(int32, 1d, C)"], 1.2),
    "mgpu_dask.kernels.knn.cuda:merge_pairs": (
        ["array(float64, 3d, C)"] * 3, 0.6),
}
"""Each kernel a GPU predict may run: the types of its launch's arguments, and about how
many seconds it compiles (what the processes are shared by)."""
_STARTED: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _name(kernel: Any) -> str:
    fn = getattr(kernel, "py_func", None) or kernel.fn  # the simulator's keeps ``fn``
    return f"{fn.__module__}:{fn.__qualname__}"


def _listed(search: Search) -> list[Any]:
    """The kernels of ``warmup._kernels`` that :data:`SIGNATURES` names (the scans aside:
    they serve the tile loop, whose kinds vary with the block's size)."""
    from .warmup import _kernels

    return [k for k in _kernels(search) if _name(k) in SIGNATURES]


def items(search: Search) -> list[dict[str, Any]]:
    """What :class:`~mgpu_dask.kernels.ahead.Compiling` takes for the Numba kernels a GPU
    predict of this kind runs."""
    return [{"numba": name, "signature": SIGNATURES[name][0], "seconds": SIGNATURES[name][1]}
            for name in sorted({_name(k) for k in _listed(search)})]


def compile_ahead(**search: Any) -> bool:
    """On a GPU worker: start compiling the kernels a predict of this kind (the fields of
    ``warmup.Search``) will run, where Numba's cache lacks one; once per process and kind.
    Returns whether it started them."""
    from numba import config

    s = Search(**search)
    if not s.gpu or config.ENABLE_CUDASIM:
        return False
    key = tuple(sorted(search.items()))
    with _LOCK:
        if key in _STARTED:
            return False
        _STARTED[key] = None
        from ..kernels.ahead import Compiling
        from ..kernels.compiled import in_cache

        wanted = items(s)
        if not wanted or in_cache(_listed(s)):
            return False
        _STARTED[key] = Compiling(wanted, min(PROCESSES, len(wanted)))
    return True
