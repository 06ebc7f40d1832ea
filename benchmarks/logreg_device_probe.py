"""The device-resident L-BFGS outside Dask: where a fit's time goes, on the GPU machine.

MNIST (the job's split, pixels in [0, 1]) at fractions 1 and 4, shards on 1
and 2 GPUs of one process, the optimiser's state on GPU 0; 100 iterations
(C=1, tol=1e-4), median of ``--repeats`` fits, for each of ``--methods``
(``ShardObjective`` methods) with each iteration one CUDA graph launch and
launched op by op (``--graphs``).  Reports wall time of the fit (set-up
included: ``buffers_ms`` of it), iterations, evaluations, line searches,
host syncs, the device time of one evaluation (CUDA events), and the host
loop on the same shards for comparison.

    python benchmarks/logreg_device_probe.py --data-dir DIR --json FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _data(data_dir: str | None, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    from mgpu_dask.data import load_dataset, split

    ds = load_dataset("mnist", data_dir=data_dir)
    s = split(ds.X, ds.y, fraction=fraction)
    return (s.X_train / np.float32(255)).astype(np.float32), s.y_train.astype(np.int32)


def _shards(X: np.ndarray, y: np.ndarray, gpus: int) -> list:
    import cupy

    cuts = np.linspace(0, len(X), gpus + 1).astype(int)
    out = []
    for g in range(gpus):
        with cupy.cuda.Device(g):
            out.append((cupy.asarray(X[cuts[g]:cuts[g + 1]]), cupy.asarray(y[cuts[g]:cuts[g + 1]])))
    return out


def _device_fits(shards: list, n: int, repeats: int, method: str, graph: bool) -> dict:
    import cupy

    from mgpu_dask import lbfgs
    from mgpu_dask.device_lbfgs import DeviceBackend

    walls, last = [], None
    with cupy.cuda.Device(0):
        for _ in range(repeats + 1):
            t = time.perf_counter()
            backend = DeviceBackend(shards, 10, n, 1.0 / n, method=method, graph=graph)
            built = time.perf_counter()
            r = lbfgs.run(backend, maxiter=100, gtol=1e-4)
            walls.append((time.perf_counter() - t, built - t))
            last = (backend, r)
        backend, r = last
        per_eval = backend.seconds_per_evaluation(20)
        backend.close()
    fit = [w for w, _ in walls[1:]]
    return {"fit_ms_median": 1e3 * statistics.median(fit), "fit_ms": [1e3 * w for w in fit],
            "buffers_ms": 1e3 * statistics.median(b for _, b in walls[1:]),
            "nit": r["nit"], "nfev": r["nfev"], "searches": r["searches"],
            "syncs": backend.syncs, "loss": r["fun"], "message": r["message"],
            "graph": backend.graphed, "graph_note": backend.graph_note,
            "graph_capture_ms": 1e3 * (backend.graph_seconds or 0.0),
            "device_ms_per_eval": 1e3 * per_eval,
            "ms_per_iteration": 1e3 * statistics.median(fit) / max(1, r["nit"])}


def _host_fit(shards: list, n: int) -> dict:
    from mgpu_dask import lbfgs
    from mgpu_dask.kernels import logreg as L

    d, k = shards[0][0].shape[1], 10
    objectives = [L.ShardObjective(X, y, k, "cublas") for X, y in shards]
    penalty = 1.0 / n

    def fun(theta):
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        for o in objectives:
            o.launch(W, b)
        parts = [o.collect() for o in objectives]
        loss, gW, gb = (sum(p[i] for p in parts) for i in range(3))
        return (loss / n + 0.5 * penalty * (W * W).sum(),
                np.concatenate([(gW / n + penalty * W).ravel(), gb / n]))

    fun(np.zeros(d * k + k))
    t = time.perf_counter()
    r = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=100, gtol=1e-4)
    return {"fit_ms": 1e3 * (time.perf_counter() - t), "nit": r["nit"], "nfev": r["nfev"],
            "loss": r["fun"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir")
    ap.add_argument("--json", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fractions", default="1,4")
    ap.add_argument("--methods", default="int8,cublas")
    ap.add_argument("--graphs", default="1,0", help="1: graph launches, 0: op by op")
    args = ap.parse_args()
    import cupy

    gpus = cupy.cuda.runtime.getDeviceCount()
    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "gpus": gpus,
           "command": "python benchmarks/logreg_device_probe.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v),
           "runs": []}
    for fraction in [float(f) for f in args.fractions.split(",")]:
        X, y = _data(args.data_dir, fraction)
        for g in sorted({1, gpus}):
            shards = _shards(X, y, g)
            row = {"fraction": fraction, "rows": len(X), "gpus": g,
                   "host_loop": _host_fit(shards, len(X))}
            for method, graph in ((m, bool(int(gr))) for m in args.methods.split(",")
                                  for gr in args.graphs.split(",")):
                name = method + ("" if graph else "-nograph")
                row[name] = dl = _device_fits(shards, len(X), args.repeats, method, graph)
                print(f"f{fraction:g} gpus {g} {name}: device fit {dl['fit_ms_median']:.1f} ms "
                      f"(graph {dl['graph']}, set-up {dl['buffers_ms']:.1f} ms) "
                      f"({dl['nit']} it, {dl['nfev']} ev, {dl['searches']} searches, "
                      f"{dl['device_ms_per_eval']:.3f} ms/eval on device, "
                      f"{dl['ms_per_iteration']:.3f} ms/it); loss {dl['loss']:.6f} "
                      f"(host loop, cuBLAS: {row['host_loop']['fit_ms']:.1f} ms, "
                      f"loss {row['host_loop']['loss']:.6f})", flush=True)
            out["runs"].append(row)
            del shards
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
