"""One line before an estimator's first call on a kind of data compiles our kernels.

A kernel is compiled the first time a machine runs it for a kind of data (dtype,
features, precision: seconds each, ten or more for a first predict) and loaded from the
kernel caches afterwards (Numba's ``NUMBA_CACHE_DIR``, CuPy's ``CUPY_CACHE_DIR``).  The
estimators ask one worker (or this process, with no client) whether the Numba cache
holds the kernels every run of the kind they are about to start uses (``knn.warmup.seen``,
``logreg.warmup.seen``: a machine that never ran one) and, where it does not, warn with
:class:`CompileWarning` before the wait, once per process and kind of run.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..exceptions import CompileWarning
from .by_name import WorkerFunction, resolve

_ASKED: set = set()


def _cached_on_a_worker(task: str, fields: dict[str, Any], client: Any) -> bool:
    """Whether the Numba cache where the run will go holds its kernels."""
    module = f"mgpu_dask.{task}.warmup"
    if client is None:
        return bool(resolve(module, "seen")(**fields))
    workers = sorted(client.nthreads())
    if not workers:
        return True
    answer = client.run(WorkerFunction(f"{module}.seen"), workers=workers[:1], **fields)
    return bool(next(iter(answer.values())))


def announce_compiles(task: str, what: str, fields: dict[str, Any], client: Any,
                      stacklevel: int = 2) -> bool:
    """Warn (:class:`CompileWarning`) where the run ``fields`` describe will compile
    ``task``'s kernels (``"knn"`` or ``"logreg"``: the fields of its ``warmup``'s
    ``Search`` or ``Fit``); ``what`` names the data in the line.  Asks once per process
    and kind of run; returns whether it warned.  A question that fails says nothing (the
    run will tell).  ``stacklevel``: the caller's frame the warning names, counted from
    the function that calls this one (1)."""
    key = (task, tuple(sorted(fields.items())), None if client is None else client.id)
    if key in _ASKED:
        return False
    _ASKED.add(key)
    try:
        if _cached_on_a_worker(task, fields, client):
            return False
    except Exception:  # noqa: BLE001 - an announcement never stops a run
        return False
    where = os.environ.get("NUMBA_CACHE_DIR") or "Numba's cache beside the package"
    warnings.warn(f"compiling mgpu_dask's {task} kernels for {what}: their first use on this "
                  f"machine takes seconds (once; later runs load them from {where})",
                  CompileWarning, stacklevel=stacklevel + 1)
    return True
