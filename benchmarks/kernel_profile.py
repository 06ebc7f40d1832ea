"""Where a warm fit's and a warm search's GPU time goes, kernel by kernel, without Dask.

usage (GPU machine): python benchmarks/kernel_profile.py OUT.json [FRACTION]

On MNIST (``--fraction``-style repeats of the rows), one process, one GPU:
the device L-BFGS of logistic regression (``solvers.fit_on_device``, 100
iterations, int8 products) and the KNN search (``kernels.knn.search.
local_candidates``, k=3), each warmed up and then run once under PyTorch's
profiler (CUPTI: every kernel of the process, CuPy's and Numba's too, graph
nodes included).  Writes each run's wall and every kernel's count and total
device time, largest first.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np


def kernels_of(prof) -> list[dict]:
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if e.device_type.name == "CUDA" or (device_us and not e.cpu_time_total):
            rows.append({"kernel": e.key[:120], "count": e.count, "us": round(device_us, 1)})
    return sorted(rows, key=lambda r: -r["us"])


def profiled(run, repeats: int = 10) -> dict:
    import cupy
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run()
    cupy.cuda.Device().synchronize()
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        cupy.cuda.Device().synchronize()
        walls.append(time.perf_counter() - started)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        cupy.cuda.Device().synchronize()
        torch.cuda.synchronize()
    rows = kernels_of(prof)
    return {"wall_ms_median": round(1e3 * statistics.median(walls), 3),
            "device_ms_total": round(sum(r["us"] for r in rows) / 1e3, 3), "kernels": rows}


def main() -> None:
    import cupy

    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.kernels.knn import operands
    from mgpu_dask.kernels.knn.search import local_candidates
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg.problem import Problem
    from mgpu_dask.logreg.solvers import fit_on_device

    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, seed=0)
    times = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    Xtr, ytr = np.concatenate([s.X_train] * times), np.concatenate([s.y_train] * times)
    Xte = np.concatenate([s.X_test] * times)
    X, labels = cupy.asarray(Xtr), cupy.asarray(ytr.astype(np.int32))
    n, d = X.shape
    problem = Problem(n, d, 10, 1.0 / n, 100, 1e-4, "device", Precision.AUTO, 1 / 255)
    fits = []

    def fit() -> None:
        fits.append(fit_on_device([(X, labels)], problem))

    out = {"rows": [n, len(Xte)], "logreg fit": profiled(fit)}
    out["logreg fit"]["profile"] = {k: v for k, v in fits[-1]["profile"].items()
                                    if isinstance(v, (int, float, str, bool))}
    Q, index = cupy.asarray(Xte), cupy.arange(n, dtype=np.int64)
    train = operands.prepare_train(X, "int8", True, 128)  # what auto picks for 8-bit rows
    out["knn search"] = profiled(lambda: local_candidates(Q, train, labels, index, 3))
    for name in ("logreg fit", "knn search"):
        r = out[name]
        print(f"{name}: wall {r['wall_ms_median']} ms, kernels {r['device_ms_total']} ms")
        for row in r["kernels"][:14]:
            print(f"  {row['us'] / 1e3:8.3f} ms  x{row['count']:<5} {row['kernel']}")
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
