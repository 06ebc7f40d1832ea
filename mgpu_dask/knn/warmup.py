"""The KNN kernels a search will use, compiled (or loaded from Numba's cache) on a worker
before the data arrives: a search of a few rows of the same kinds (dtype, precision,
method, k, vote) as the run's.  Runs on the workers; imports no scikit-learn."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from ..kernels import knn as kernels
from ..kernels.compiled import Steps, compilations, cupy_kernels, in_cache, track_cupy
from ..kernels.knn import precision as precisions
from ..kernels.knn.search import list_length
from ..kernels.launch import finished
from ..kernels.precision import Precision
from ..parallel.workers import gpu_capability
from .blocks import row_index

ROWS = 64  # training rows of the warm-up search (queries: a quarter of them)


class Search(NamedTuple):
    """What a run's searches are made of, as far as the kernels care."""

    gpu: bool
    dtype: str
    n_features: int
    precision: str
    method: str
    k: int
    margin: int | None
    weights: str
    merge: bool   # candidates of several training shards are merged (the shard plan)


def _rows(search: Search) -> np.ndarray:
    rng = np.random.default_rng(0)
    if np.dtype(search.dtype) == np.uint8:
        return rng.integers(0, 256, (ROWS, search.n_features)).astype(np.uint8)
    return rng.standard_normal((ROWS, search.n_features)).astype(search.dtype)


def _fused(search: Search, exact: bool, K: int) -> bool:
    """Whether the search runs the fused kernel (CuPy's, not Numba's) instead of a scan:
    int8 operands of 8-bit rows, or float16 operands of float rows (their plain product
    reads whole 64-byte stages of each row)."""
    from ..kernels.knn import floats, fused
    from ..kernels.knn.operands import padded_shape

    try:
        capability = gpu_capability()
    except Exception:  # no CuPy or no GPU here: the scan, as on a CPU
        return False
    chosen, _ = precisions.choose(Precision.parse(search.precision), exact, capability)
    row = (padded_shape(1, search.n_features)[1] if exact
           else 2 * floats.part_columns(search.n_features))
    return fused.usable_for(K, chosen, exact, search.method, row)


def _module(search: Search) -> Any:
    """The module of the kernels such a search runs: CUDA's or the CPU's."""
    if search.gpu:
        from ..kernels.knn import cuda as module
    else:
        from ..kernels.knn import cpu as module
    return module


def _exact(search: Search) -> bool:
    """Whether such a search's keys are exact (8-bit values by the product)."""
    return precisions.eight_bit_of(np.dtype(search.dtype)).exact and search.method == "gemm"


def _kernels(search: Search) -> list[Any]:
    """The Numba kernels such a search runs."""
    from ..kernels.knn import cuda_rows

    module, exact = _module(search), _exact(search)
    K = list_length(search.k, search.margin, search.n_features, ROWS, exact)
    names = ["vote_rows"]
    if search.gpu and not _fused(search, exact, K):
        names.append("scan_tile_short" if K <= module.SHORT_K else
                     "scan_tile" if K <= module.SCAN_K else "scan_tile_long")
    elif not search.gpu:
        names.append("scan_tile")
    if search.merge:
        names.append("merge_pairs")
    if search.method == "direct":
        names.append("sqdist_tiled" if search.gpu else "sqdist_direct")
    found = [getattr(module, name) for name in names]
    if not exact:
        found.append(_re_rank(search))
    if search.gpu:  # the per-row work of every search, and the float16 queries' operand
        found.append(cuda_rows.pack_rows)
        if not exact and search.method == "gemm" and Precision.parse(search.precision) in (
                Precision.AUTO, Precision.FP16):
            found.append(cuda_rows.half_query_rows)
    return found


def cached(**search: Any) -> bool:
    """Whether Numba's cache on this worker holds every kernel the search runs (the
    fields of :class:`Search` as keywords)."""
    return in_cache(_kernels(Search(**search)))


def seen(**search: Any) -> bool:
    """Whether this worker's Numba cache holds the kernel every search of this kind runs
    (the vote for 8-bit rows, the exact re-rank for float rows): False on a machine that
    never ran one (what ``parallel.first_use`` asks; :func:`cached` lists them all)."""
    s = Search(**search)
    return in_cache([_module(s).vote_rows if _exact(s) else _re_rank(s)])


def _re_rank(search: Search) -> Any:
    """The exact re-rank kernel such a search of float rows runs."""
    from ..kernels.knn import cuda_rows

    if search.gpu and search.n_features <= cuda_rows.SHORT_ROWS:
        return cuda_rows.refine_rows_short
    return _module(search).refine_rows


def warm_up(**fields: Any) -> dict[str, Any]:
    """Search ``ROWS`` rows as the run will (the fields of :class:`Search` as keywords);
    returns how many kernels were compiled (not loaded from the cache) and the seconds it
    took, the first CUDA call included, and each step's."""
    started, before = time.perf_counter(), compilations()
    steps = Steps()
    search = Search(**fields)
    if search.gpu:
        import cupy as xp

        track_cupy()  # CuPy's compiles count too (kernels.compiled)
        xp.zeros(1)
        steps.done("CuPy, the first CUDA call")
    else:
        xp = np
    rows = _rows(search)
    eight = precisions.eight_bit_of(rows.dtype)
    asked = Precision.parse(search.precision)
    if asked is Precision.INT8 and not eight.exact:
        asked = Precision.AUTO
    chosen, _ = precisions.choose(asked, eight.exact, gpu_capability() if search.gpu else None)
    if search.method == "direct":
        chosen = Precision.FP32
    train = kernels.prepare_train(xp.asarray(rows), chosen, eight.exact, eight.shift,
                                  search.method, split=chosen is Precision.FP16)
    steps.done("training rows")
    labels = xp.asarray(np.arange(ROWS, dtype=np.int32) % 3)
    index = row_index(xp, ROWS, 0)
    cand = kernels.local_candidates(xp.asarray(rows[: ROWS // 4]), train, labels, index,
                                    min(search.k, ROWS), margin=search.margin)
    finished(cand)
    steps.done("distances and top-k")
    kernels.vote(cand, 3, search.weights)
    if search.merge:
        kernels.merge(cand, cand)
    finished(cand)
    steps.done("vote and merge")
    return {"compiled": compilations() - before, "seconds": time.perf_counter() - started,
            "ended": time.time(), "steps": steps.seconds, **({"cupy kernels": cupy_kernels()} if search.gpu else {})}
