"""A first search's Numba kernels compiled in side processes while the fit places the rows.

A machine's first predict on a kind of data compiles the search's Numba kernels one after
another on the worker that searches: the vote, the exact re-rank of float rows and the
merge of shards' candidates, a second or more each (docs/performance-history.md).  Where
the fit finds them missing from the workers' cache (it says so: ``first_use``), one
worker per host hands them to side processes (:class:`~mgpu_dask.kernels.ahead.Compiling`)
that compile them into the cache while the fit places and prepares the rows; that
worker's first search waits for them (:func:`settle`) and then loads them.  CuPy's
kernels are not listed: their sources follow the data's kind and each compiles in a
fraction of a second.  Runs on the workers but :func:`start_on_workers`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..kernels.ahead import Compiling, encode
from ..kernels.compiled import in_cache
from ..parallel.by_name import WorkerFunction
from ..parallel.workers import scheduler_workers

PROCESSES = 3
"""Side processes at most (one kernel each; each imports Numba and CuPy)."""
SECONDS = 120.0
"""How long a search waits for them; what is not done by then compiles where it runs."""
_PENDING: list[Compiling] = []  # started here, until a search waits for them
_STARTED: set = set()           # kinds of search this process has asked for
_LOCK = threading.Lock()


def typed(exact: bool, merge: bool) -> list[tuple[Any, dict[str, Any]]]:
    """The GPU search's Numba kernels, each with its :mod:`mgpu_dask.kernels.ahead` item
    (``module:name`` and argument types, typed from arguments as the search passes them):
    the vote, the re-rank where the keys are not exact (float rows), the merge where
    shards' candidates are merged (``merge``)."""
    import numba

    from ..kernels.knn import cuda as K

    cand = np.zeros((1, 1, 3))
    calls: list[tuple[Any, tuple]] = [
        (K.vote_rows, (cand, 1, True, np.zeros((1, 1)), np.zeros(1, np.int32)))]
    if not exact:
        rows, slots = np.zeros((1, 1), np.float32), np.zeros((1, 1), np.int32)
        calls.append((K.refine_rows, (rows, rows, slots, 1, 0, np.zeros((1, 1)), slots)))
    if merge:
        calls.append((K.merge_pairs, (cand, cand, cand)))
    items = []
    for kernel, args in calls:
        fn = getattr(kernel, "py_func", None) or kernel.fn  # the simulator's keeps ``fn``
        items.append((kernel, {"numba": f"{fn.__module__}:{fn.__qualname__}",
                               "signature": encode(tuple(numba.typeof(a) for a in args))}))
    return items


def compile_ahead(exact: bool, merge: bool) -> bool:
    """Start compiling the kernels :func:`typed` lists in side processes where this process
    has a GPU and Numba's cache lacks one of them; once per kind of search and process.
    Returns whether it started them."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return False
    with _LOCK:
        if (exact, merge) in _STARTED:
            return False
        _STARTED.add((exact, merge))
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: nothing to compile for
        return False
    kernels = typed(exact, merge)
    if in_cache([kernel for kernel, _ in kernels]):
        return False
    compiling = Compiling([item for _, item in kernels], min(PROCESSES, len(kernels)))
    with _LOCK:
        _PENDING.append(compiling)
    return True


def settle() -> None:
    """Wait for the compiles this process started (at most :data:`SECONDS` each); nothing
    started: a lookup."""
    if not _PENDING:
        return
    with _LOCK:
        pending, _PENDING[:] = list(_PENDING), []
    for compiling in pending:
        compiling.wait(SECONDS)


def start_on_workers(client: Any, exact: bool, merge: bool) -> None:
    """:func:`compile_ahead` on the first worker of each host (here, with no client): the
    workers of a host share its caches.  A question that fails starts nothing."""
    try:
        if client is None:
            compile_ahead(exact, merge)
            return
        first: dict[str, str] = {}
        for address, info in sorted(scheduler_workers(client).items()):
            first.setdefault(str(info.get("host")), address)
        client.run(WorkerFunction("mgpu_dask.knn.ahead.compile_ahead"), exact, merge,
                   workers=list(first.values()))
    except Exception:  # noqa: BLE001 - compiling ahead never stops a fit
        pass
