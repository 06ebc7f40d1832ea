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

import warnings
from typing import Any

from ..exceptions import CompileWarning
from .by_name import WorkerFunction, resolve

_ASKED: set = set()


def _ask(client: Any, qualified: str, **kwargs: Any) -> Any:
    """``qualified(**kwargs)`` on the first worker (here, with no client)."""
    if client is None:
        return resolve(*qualified.rsplit(".", 1))(**kwargs)
    first = sorted(client.nthreads())[:1]
    return next(iter(client.run(WorkerFunction(qualified), workers=first, **kwargs).values()))


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
        if (client is not None and not client.nthreads()) or \
                _ask(client, f"mgpu_dask.{task}.warmup.seen", **fields):
            return False
        where = _ask(client, "mgpu_dask.kernels.compiled.cache_dir")  # the worker's own
    except Exception:  # noqa: BLE001 - an announcement never stops a run
        return False
    where = where or "Numba's cache beside the package"
    warnings.warn(f"compiling mgpu_dask's {task} kernels for {what}: their first use on this "
                  f"machine takes seconds (once; later runs load them from {where})",
                  CompileWarning, stacklevel=stacklevel + 1)
    return True
