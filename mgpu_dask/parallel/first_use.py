"""One line before an estimator's first call on a kind of data compiles our kernels, and
those kernels compiled on the workers while the call goes on.

A kernel is compiled the first time a machine runs it for a kind of data (dtype,
features, precision: seconds each, ten or more for a first predict) and loaded from the
kernel caches afterwards (Numba's ``NUMBA_CACHE_DIR``, CuPy's ``CUPY_CACHE_DIR``).  The
estimators ask one worker (or this process, with no client) whether the Numba cache
holds the kernels every run of the kind they are about to start uses (``knn.warmup.seen``,
``logreg.warmup.seen``: a machine that never ran one) and, where it does not, warn with
:class:`CompileWarning` before the wait, once per process and kind of run.

:func:`warm_up_workers` then has every worker compile them in a thread of its own (a
small run of the same kind, ``warmup.warm_up``) while the call places and prepares the
rows; a worker's first search waits for that thread (:func:`settled`) rather than
compile the same kernels beside it.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

from ..exceptions import CompileWarning
from .by_name import WorkerFunction, resolve

_ASKED: set = set()
_WARMING: dict[tuple, threading.Thread] = {}  # this process's warm-ups, by kind of run
FAILED: dict[tuple, str] = {}  # a warm-up that raised: its kind and the error, for a look
_WARMING_LOCK = threading.Lock()
SETTLE_SECONDS = 120.0
"""The longest a search waits for this process's warm-ups (then it compiles itself)."""


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


def warm_up_workers(task: str, fields: dict[str, Any], client: Any) -> None:
    """Have every worker (this process, with no client) start compiling ``task``'s kernels
    for the run ``fields`` describe (:func:`warm_up_here`); returns at once.  A question
    that fails starts nothing (the run compiles what it needs itself)."""
    try:
        if client is None:
            warm_up_here(task, **fields)
        else:
            client.run(WorkerFunction("mgpu_dask.parallel.first_use.warm_up_here"), task,
                       **fields)
    except Exception:  # noqa: BLE001 - a warm-up never stops a run
        pass


def warm_up_here(task: str, **fields: Any) -> bool:
    """Run on a worker: ``task``'s ``warmup.warm_up(**fields)`` in a thread of its own, once
    per kind of run in this process; returns whether it started one."""
    key = (task, tuple(sorted(fields.items())))
    with _WARMING_LOCK:
        if key in _WARMING:
            return False
        thread = threading.Thread(target=_warm, args=(key, task, fields), daemon=True,
                                  name=f"mgpu-dask-{task}-warm-up")
        _WARMING[key] = thread
    thread.start()
    return True


def _warm(key: tuple, task: str, fields: dict[str, Any]) -> None:
    try:
        resolve(f"mgpu_dask.{task}.warmup", "warm_up")(**fields)
    except Exception as exc:  # noqa: BLE001 - the run itself compiles and says what fails
        FAILED[key] = f"{type(exc).__name__}: {exc}"


def settled(timeout: float = SETTLE_SECONDS) -> None:
    """Wait, at most ``timeout`` seconds in all, for the warm-ups under way in this
    process (nothing to wait for: a lookup)."""
    if not _WARMING:
        return
    with _WARMING_LOCK:
        running = [t for t in _WARMING.values() if t.is_alive()]
    deadline = time.monotonic() + timeout
    for thread in running:
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
