"""Compiling what a job will run, on the workers, as soon as they are up.

The first run on a machine compiles our Numba kernels (seconds each, on the
GPU path) and CuPy's; later runs load them from the caches
(``NUMBA_CACHE_DIR``, ``CUPY_CACHE_DIR``: under the user's cache folder unless
set, see :func:`use_kernel_caches`).  A job describes its searches or fits
(:func:`knn_spec`, :func:`logreg_spec`); :func:`begin` is handed to the
starting cluster, which calls it as soon as the workers are up: it says in
one line when a compile is coming, then has every worker run a small search
or fit of the same kinds as the job's while the client loads its data.
:func:`finish` waits for them and records the phase: ``compile`` where
anything was compiled, ``warm-up`` (loading cached kernels, the first CUDA
call) otherwise.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, NamedTuple

from .. import config
from .phases import Phases

WORKER_MODULES = {"knn": "mgpu_dask.knn.warmup", "logreg": "mgpu_dask.logreg.warmup"}


def use_kernel_caches() -> dict[str, str]:
    """Point Numba's and CuPy's kernel caches under the user's cache folder
    (``mgpu-dask`` data cache dir, ``kernels/numba`` and ``kernels/cupy``), unless the
    environment names them already; returns the two folders.  Called before any worker
    starts (they inherit the environment), so a ``pip install`` into a read-only
    site-packages caches its kernels all the same."""
    base = config.cache_dir() / "kernels"
    folders = {}
    for variable, sub in (("NUMBA_CACHE_DIR", "numba"), ("CUPY_CACHE_DIR", "cupy")):
        if not os.environ.get(variable):
            os.environ[variable] = str(base / sub)
        folders[variable] = os.environ[variable]
    return folders


JOB_MARGIN = 8
"""The ``knn`` job's re-rank margin: the one its compile-ahead list was recorded with
(float32 pixels; 8-bit ones need none)."""


def knn_spec(*, dtype: str, dataset: str | None, precision: str, method: str, k: int,
             weights: str, plan: str, workers: int | None) -> dict[str, Any]:
    """What a ``knn`` job's searches are made of (``knn.warmup.Search`` but the device)."""
    deformed = bool(dataset and dataset.endswith("-deformed"))
    return {"task": "knn", "dtype": "float32" if dtype == "float32" else "uint8",
            "n_features": 64 if dataset == "digits" else 784, "precision": precision,
            "method": method, "k": k, "margin": JOB_MARGIN, "weights": weights,
            "merge": plan == "shard" or (deformed and workers != 1)}


def logreg_spec(*, dtype: str, dataset: str | None, precision: str, classes: list | None,
                optimizer: str) -> dict[str, Any]:
    """What a ``logreg`` job's fits are made of (``logreg.warmup.Fit`` but the device).
    The labels' dtype matters too: CuPy compiles the label encoding per dtype, and every
    data set of ours loads its labels as int32.  Deformed MNIST's shards may hold a
    million rows or more, which evaluate in one pass over the rows: ``large_shards``
    (only there, so that the other runs' specs stay as ``ahead.json`` lists them)."""
    eight = dtype != "float32"
    spec = {"task": "logreg", "dtype": "uint8" if eight else "float32",
            "n_features": 64 if dataset == "digits" else 784, "precision": precision,
            "n_classes": len(classes) if classes else 10, "optimizer": optimizer,
            "scale": 1 / 255 if eight else None,
            "label_dtype": "int32"}
    if dataset and dataset.endswith("-deformed"):
        spec["large_shards"] = True
    return spec


AHEAD_TIMEOUT = 600.0
"""Seconds the warm-up waits for the compiling processes of :mod:`.ahead` at most."""


class WarmUp(NamedTuple):
    futures: list[Any]
    began: tuple[float, float]     # perf_counter and wall clock when the workers were asked
    cached: bool                   # every kernel the job runs was in the caches
    compiling: Any = None          # ahead.start's processes, waited for
    ahead: dict[str, Any] | None = None  # what they did


def begin(spec: dict[str, Any], say: Callable[[str], None],
          compiling: Any = None) -> Callable[[Any], WarmUp]:
    """The starting cluster's ``on_ready``: waits for ``compiling`` (:func:`.ahead.start`'s
    processes, if any), says in one line if a compile is coming, then starts a small run of
    ``spec``'s kind on every worker, under way when this returns."""

    def on_ready(running: Any) -> WarmUp:
        from ..parallel.by_name import WorkerFunction
        from ..parallel.placement import fresh_name
        from ..parallel.workers import detect_device, worker_addresses

        ahead = compiling.wait(AHEAD_TIMEOUT) if compiling is not None else None
        client, plan = running.client, running.plan
        fields = {k: v for k, v in spec.items() if k != "task"}
        fields["gpu"] = (plan.device if plan.device in ("gpu", "cpu")
                         else detect_device(client)) == "gpu"
        module = WORKER_MODULES[spec["task"]]
        workers = worker_addresses(client)
        cached = all(client.run(WorkerFunction(f"{module}.cached"), workers=workers,
                                **fields).values())
        if not cached:
            where = os.environ.get("NUMBA_CACHE_DIR") or "Numba's cache"
            say(f"compiling our {'CUDA ' if fields['gpu'] else ''}kernels, first run on this "
                f"machine: cached in {where} for next time")
        began = (time.perf_counter(), time.time())
        futures = [client.submit(WorkerFunction(f"{module}.warm_up"), workers=[w], pure=False,
                                 key=fresh_name("compile" if not cached else "warm-up"),
                                 **fields)
                   for w in workers]
        return WarmUp(futures, began, cached, compiling, ahead)

    return on_ready


def finish(warm: WarmUp, phases: Phases, timeout: float) -> dict[str, Any]:
    """Wait for every worker's warm-up and record it as the ``compile`` phase (anything
    compiled) or ``warm-up``, after the ``compile`` phase of the compiling processes
    (:mod:`.ahead`) where they compiled anything; returns what the workers said."""
    from distributed import wait

    if warm.ahead and warm.ahead["compiled"]:
        began, ended = warm.compiling.began, warm.compiling.ended
        phases.record("compile", ended[0] - began[0], (began[1], ended[1]))
    wait(warm.futures, timeout=timeout)
    done = [f.result() for f in warm.futures]
    client = warm.futures[0].client if warm.futures else None
    compiled = sum(d["compiled"] for d in done)
    # until the last worker finished (the workers' clocks, bounded by now): a client
    # that comes to wait only later (still importing) does not lengthen the phase
    now = time.time()
    ends = [d.get("ended") for d in done]
    ended = min(now, max(ends)) if done and None not in ends else now
    phases.record("compile" if compiled else "warm-up", max(0.0, ended - warm.began[1]),
                  (warm.began[1], max(ended, warm.began[1])))
    return {"compiled": compiled, "cached": warm.cached,
            **({"compiled ahead": warm.ahead} if warm.ahead else {}),
            "seconds per worker": [d["seconds"] for d in done],
            "steps": done[0].get("steps") if done else None,
            "by the warm-up": client.run(_compiled) if client is not None else {},
            **({"cupy kernels by the warm-up": [d.get("cupy kernels") for d in done]}
               if any(d.get("cupy kernels", {}).get("tracked") for d in done) else {})}


def _compiled() -> list[str]:
    from ..kernels.compiled import compiled

    return compiled()


def _cupy_kernels() -> dict[str, Any]:
    from ..kernels.compiled import cupy_kernels

    return cupy_kernels()


def cupy_kernels_by_now(client: Any, kernels: dict[str, Any] | None) -> dict[str, Any]:
    """``{"cupy kernels by the end": {worker: ...}}``: CuPy's kernel requests on each
    worker since its warm-up began, what getting CuPy's kernels (loaded or compiled)
    cost the whole job; ``{}`` where the warm-up tracked no CuPy (CPU workers)."""
    if not kernels or "cupy kernels by the warm-up" not in kernels:
        return {}
    return {"cupy kernels by the end": {w: got for w, got in client.run(_cupy_kernels).items()
                                        if got["tracked"]}}


def compiled_later(client: Any, kernels: dict[str, Any] | None) -> dict[str, list[str]]:
    """Per worker, the kernels compiled after the warm-up (what it did not cover)."""
    if not kernels or "by the warm-up" not in kernels:
        return {}
    before = kernels["by the warm-up"]
    now = client.run(_compiled)
    later = {w: sorted(set(sigs) - set(before.get(w, ()))) for w, sigs in now.items()}
    return {w: sigs for w, sigs in later.items() if sigs}
