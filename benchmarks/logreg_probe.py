"""Where one logistic-regression evaluation spends its time, on the GPU machine.

Times ``ShardObjective`` (six bound operations per GPU: upload, clear,
cuBLAS ``X @ W``, our kernel, cuBLAS ``X^T @ resid``, download) on MNIST shards:

* which stream Numba's ordinary launch on an external stream uses;
* every GPU's evaluation against float64 NumPy at changing points;
* host cost of each operation (median of many calls, no waiting);
* device time of each operation and of a whole evaluation (CUDA events);
* milliseconds per evaluation (queue every shard, then collect all), for one
  and several GPUs and three data sizes;
* with ``--workers N`` (default 4), the same inside a dask-cuda worker: on the
  task thread, a plain thread, and with the worker's statistical profiler
  stopped.

    python benchmarks/logreg_probe.py --data-dir DIR --json FILE [--workers 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np


def _mnist(data_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
    from mgpu_dask.data import load_dataset, split

    ds = load_dataset("mnist", data_dir=data_dir)
    s = split(ds.X, ds.y)
    return (s.X_train / np.float32(255)).astype(np.float32), s.y_train.astype(np.int32)


def _objectives(X: np.ndarray, y: np.ndarray, gpus: int, rows: int, offset: int = 0) -> list:
    """One ShardObjective per GPU, each on ``rows`` rows (tiled from X when more)."""
    import cupy

    from mgpu_dask.kernels import logreg as L

    out = []
    for g in range(gpus):
        idx = (np.arange(rows) + offset + g * 997) % len(X)
        with cupy.cuda.Device(g):
            out.append(L.ShardObjective(cupy.asarray(X[idx]), cupy.asarray(y[idx]), 10))
    return out


def _per_eval_ms(objectives: list, n: int = 200) -> dict:
    rng = np.random.default_rng(0)
    W, b = rng.standard_normal((784, 10)) * 0.01, rng.standard_normal(10) * 0.01
    for _ in range(5):
        for o in objectives:
            o.launch(W, b)
        for o in objectives:
            o.collect()
    launch_t, total = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        for o in objectives:
            o.launch(W, b)
        t1 = time.perf_counter()
        for o in objectives:
            o.collect()
        t2 = time.perf_counter()
        launch_t.append(t1 - t0)
        total.append(t2 - t0)
    return {"eval_ms": 1e3 * statistics.median(total), "launch_ms": 1e3 * statistics.median(launch_t),
            "eval_ms_mean": 1e3 * statistics.mean(total)}


def _op_costs(o, n: int = 2000) -> dict:
    """Host microseconds per call of each operation of an evaluation (queued, not waited for)."""
    from cupy.cuda import runtime

    W, b = np.zeros((784, 10)), np.zeros(10)
    stream = o.stream.ptr
    ops = {
        "copy params to pinned": lambda: (o.params_h.__setitem__(slice(0, 7840), W.ravel()),
                                          o.params_h.__setitem__(slice(7840, None), b)),
        "upload (memcpyAsync)": lambda: runtime.memcpyAsync(
            o.params.data.ptr, o.params_h.ctypes.data, o.params.nbytes, runtime.memcpyHostToDevice,
            stream),
        "memsetAsync": lambda: runtime.memsetAsync(o.sums.data.ptr, 0, o.sums.nbytes, stream),
        "X @ W (bound cuBLAS)": o._logits,
        "kernel (bound launch)": o._kernel,
        "X^T @ resid (bound cuBLAS)": o._gradient,
        "download (memcpyAsync)": lambda: runtime.memcpyAsync(
            o.out_h.ctypes.data, o.out.data.ptr, o.out.nbytes, runtime.memcpyDeviceToHost, stream),
        "with device": lambda: o.device.__enter__() and o.device.__exit__(None, None, None),
        "launch (all of it)": lambda: o.launch(W, b),
    }
    out = {}
    with o.device:
        for name, fn in ops.items():
            for _ in range(10):
                fn()
            o.stream.synchronize()
            times = []
            for i in range(n):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
                if i % 100 == 99:
                    o.stream.synchronize()
            o.stream.synchronize()
            out[name] = 1e6 * statistics.median(times)
        t = time.perf_counter()
        for _ in range(n):
            o.stream.synchronize()
        out["synchronize (idle stream)"] = 1e6 * (time.perf_counter() - t) / n
    out["bound launch"] = getattr(o._kernel, "bound", None)
    return out


def _check(X: np.ndarray, y: np.ndarray, gpus: int, rows: int = 13125, points: int = 5) -> dict:
    """Every GPU's evaluation (all queued, then collected) against float64 NumPy."""
    objs = _objectives(X, y, gpus, rows)
    rng = np.random.default_rng(1)
    worst = {"loss_rel_err": 0.0, "gW_max_err": 0.0, "gb_max_err": 0.0}
    for _ in range(points):
        W, b = rng.standard_normal((784, 10)) * 0.05, rng.standard_normal(10) * 0.1
        for o in objs:
            o.launch(W, b)
        for o in objs:
            loss, gW, gb = o.collect()
            Xs, ys = o.X.get().astype(np.float64), o.labels.get()
            z = Xs @ W + b
            z -= z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            ref = -np.log(p[np.arange(len(ys)), ys]).sum()
            r = p - np.eye(10)[ys]
            for key, err in (("loss_rel_err", abs(loss - ref) / ref),
                             ("gW_max_err", float(np.abs(gW - Xs.T @ r).max())),
                             ("gb_max_err", float(np.abs(gb - r.sum(0)).max()))):
                worst[key] = max(worst[key], float(err))
    worst["bound_launch"] = [bool(o._kernel.bound) for o in objs]
    worst["why"] = getattr(objs[0]._kernel, "why", None)
    return worst


def _events_ms(o, fn, n: int = 50) -> float:
    import cupy

    with o.device:
        fn()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(o.stream)
        for _ in range(n):
            fn()
        end.record(o.stream)
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / n


def _breakdown(X: np.ndarray, y: np.ndarray) -> list:
    """Device time of each operation of an evaluation and of a whole evaluation."""
    out = []
    W, b = np.zeros((784, 10)), np.zeros(10)
    for rows in (13125, 52500, 210000):
        o = _objectives(X, y, 1, rows)[0]
        row = {"rows": rows, "X @ W (cuBLAS)": _events_ms(o, o._logits),
               "kernel": _events_ms(o, o._kernel),
               "X^T @ resid (cuBLAS)": _events_ms(o, o._gradient),
               "evaluation": _events_ms(o, lambda: o.launch(W, b))}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def _numba_stream() -> dict:
    """Which stream Numba's ordinary launch on an external stream really uses."""
    import cupy
    from numba import cuda

    @cuda.jit
    def spin(a, n):
        i = cuda.grid(1)
        if i < a.size:
            v = a[i]
            for _ in range(n):
                v = v * 0.999 + 0.001
            a[i] = v

    a = cupy.ones(1 << 20, dtype=np.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    spin[4096, 256, cuda.external_stream(s.ptr)](a, 10)  # compile
    cupy.cuda.Device().synchronize()
    spin[4096, 256, cuda.external_stream(s.ptr)](a, 200000)
    busy = cupy.cuda.runtime.streamQuery(s.ptr)
    cupy.cuda.Device().synchronize()
    return {"streamQuery right after launch (0 = idle, 600 = busy)": int(busy)}


CONFIGS = [(1, 13125), (2, 13125), (4, 13125), (1, 52500), (4, 52500), (1, 210000)]


def suite(data_dir: str | None, configs=CONFIGS, where="bare") -> dict:
    """Per-evaluation timings for each (GPUs, rows per GPU)."""
    import cupy

    X, y = _mnist(data_dir)
    gpus_here = cupy.cuda.runtime.getDeviceCount()
    zeros = (np.zeros((784, 10)), np.zeros(10))
    rows = []
    for gpus, n in configs:
        if gpus > gpus_here:
            continue
        r = {"where": where, "gpus": gpus, "rows_per_gpu": n}
        try:
            objs = _objectives(X, y, gpus, n)
            r.update(_per_eval_ms(objs))
            r["gpu_ms_one_shard"] = _events_ms(objs[0], lambda o=objs[0]: o.launch(*zeros))
            del objs
        except Exception as exc:  # keep the other rows
            r["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(r), flush=True)
        rows.append(r)
    return {"rows": rows}


def in_worker(data_dir: str | None, mode: str) -> dict:
    """Run ``suite`` inside a worker: on the task thread, a new thread, or profiler stopped."""
    from distributed import get_worker

    configs = [(1, 13125), (4, 13125), (1, 52500), (4, 52500)]
    if mode == "no-profiler":
        w = get_worker()
        for name in list(w.periodic_callbacks):
            if "profile" in name:
                w.periodic_callbacks[name].stop()
    if mode == "thread":
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(suite(data_dir, configs, where=mode)))
        t.start()
        t.join()
        return box
    return suite(data_dir, configs, where=mode)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--json", required=True)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    import cupy

    X, y = _mnist(args.data_dir)
    out: dict = {"numba_stream": _numba_stream()}
    print(out["numba_stream"], flush=True)
    out["check"] = _check(X, y, cupy.cuda.runtime.getDeviceCount())
    out["check_52500"] = _check(X, y, cupy.cuda.runtime.getDeviceCount(), rows=52500, points=2)
    print(out["check"], out["check_52500"], flush=True)
    with cupy.cuda.Device(0):
        objs = _objectives(X, y, 1, 13125)
        out["op_costs_us"] = _op_costs(objs[0])
        print(out["op_costs_us"], flush=True)
    out["device_time"] = _breakdown(X, y)
    out["bare"] = suite(args.data_dir)
    json.dump(out, open(args.json, "w"), indent=1)
    if args.workers:
        from mgpu_dask._compat import scheduler_workers
        from mgpu_dask.cluster import connect

        with connect(args.workers, device="gpu", dashboard_address=":0") as rc:
            c = rc.client
            w0 = sorted(scheduler_workers(c))[0]
            for mode in ("task", "thread", "no-profiler"):
                out[f"worker-{mode}"] = c.submit(in_worker, args.data_dir, mode, workers=[w0],
                                                 pure=False).result(timeout=300)
    json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
