"""What the Dask-free L-BFGS benchmarks share: MNIST's training rows and the device
L-BFGS of the ``logreg`` job's problem (all four, ``lbfgs_timeline_gpus.py`` too), and
warm fits of it timed on the host (``lbfgs_split.py``, ``lbfgs_ipc.py``,
``lbfgs_blocks.py``)."""

from __future__ import annotations

import hashlib
import statistics
import time
from typing import Any

import numpy as np

SCALE = 1 / 255  # uint8 pixels, as the job's input_scale


def mnist_rows(copies: int) -> tuple[np.ndarray, np.ndarray]:
    """MNIST's training rows (uint8) and class indices (int32), ``copies`` times over."""
    from mgpu_dask.data import load_dataset, split

    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, seed=0)
    return (np.ascontiguousarray(np.concatenate([s.X_train] * copies)),
            np.concatenate([s.y_train] * copies).astype(np.int32))


def backend(shards: list[tuple[Any, Any]], n: int) -> Any:
    """A :class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend` on the current GPU over
    ``shards`` (CuPy rows and labels on any GPUs) for the ``logreg`` job's problem: 10
    classes, C = 1 over ``n`` rows, int8 products where the rows are levels, uint8 scale."""
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg.lbfgs import device as dev

    return dev.DeviceBackend(shards, 10, n, 1.0 / n, precision=Precision.AUTO, scale=SCALE)


def fit_times(shards: list[tuple[Any, Any]], n: int, repeats: int = 12) -> dict[str, Any]:
    """One :class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend` on GPU 0 over ``shards``
    (CuPy rows and labels on any GPUs), three warm-up fits of 100 iterations, then
    ``repeats`` more from the same backend (``reuse``): their median and minimum wall
    (ms), the last fit's result and the first 16 hex digits of its point's SHA-256."""
    import cupy

    from mgpu_dask.logreg.lbfgs import loop

    with cupy.cuda.Device(0):
        fits = backend(shards, n)
        walls = []
        for i in range(repeats + 3):
            if i:
                assert fits.reuse(shards)
            t = time.perf_counter()
            result = loop.run(fits, maxiter=100, gtol=1e-4)
            walls.append(time.perf_counter() - t)
        point = hashlib.sha256(fits.solution().tobytes()).hexdigest()[:16]
        out = {"median_ms": round(1e3 * statistics.median(walls[3:]), 3),
               "min_ms": round(1e3 * min(walls[3:]), 3), "nit": result["nit"],
               "nfev": result["nfev"], "fun": float(result["fun"]), "point": point,
               "graph": fits.graph_note, "run_ahead": fits.run_ahead, "syncs": fits.syncs,
               "bridge": getattr(fits, "bridge", 0),
               "precision": ",".join(str(o.precision) for o in fits.objectives)}
        fits.close()
    return out
