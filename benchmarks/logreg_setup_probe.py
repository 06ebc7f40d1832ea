"""Where a multi-GPU logistic-regression fit's set-up time goes, outside Dask.

Rows of 8-bit levels / 255 (``--rows`` x 784, ten classes) split over every
GPU.  Times, median of ``--repeats``: a holder's export of its rows as int8
levels (``logreg_fit.export_rows`` as a peer does it: converted on its GPU, in
allocations of their own, IPC handles), the leader's ``DeviceBackend`` over
the levels of every GPU (buffers, bound launches), and the device time of
the first and of later evaluations; then a cProfile of one export and one
set-up (the 25 costliest calls by cumulative time).

    python benchmarks/logreg_setup_probe.py --json FILE
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import numpy as np


def _profiled(fn) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    return text.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=52500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    import cupy

    from mgpu_dask import peer_views
    from mgpu_dask.device_lbfgs import DeviceBackend
    from mgpu_dask.kernels import logreg_int8
    from mgpu_dask.logreg_fit import export_rows

    gpus = cupy.cuda.runtime.getDeviceCount()
    rng = np.random.default_rng(0)
    n, d, k = args.rows, 784, 10
    y = rng.integers(0, k, n).astype(np.uint8)
    X = rng.integers(0, 256, (n, d)).astype(np.float32) * np.float32(1 / 255)
    cuts = np.linspace(0, n, gpus + 1).astype(int)
    out = {"command": "python benchmarks/logreg_setup_probe.py " + " ".join(
        f"--{key} {value}" for key, value in vars(args).items()),
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "gpus": gpus}

    last = gpus - 1
    with cupy.cuda.Device(last):
        rows = cupy.asarray(X[cuts[-2]:])
        labels = y[cuts[-2]:]

        def export(token: str) -> None:
            export_rows(token, [rows], labels, False, True)
            peer_views.release(token)

        export("warm")
        times = []
        for i in range(args.repeats):
            t = time.perf_counter()
            export(f"t{i}")
            times.append(time.perf_counter() - t)
        out["holder export ms"] = 1e3 * statistics.median(times)
        export_profile = _profiled(lambda: export("profiled"))

    shards = []
    for g in range(gpus):
        with cupy.cuda.Device(g):
            made = logreg_int8.levels(cupy.asarray(X[cuts[g]:cuts[g + 1]]))
            shards.append((made, cupy.asarray(y[cuts[g]:cuts[g + 1]].astype(np.int32))))
    with cupy.cuda.Device(0):
        def setup() -> None:
            DeviceBackend(shards, k, n, 1.0 / n, method="int8").close()

        setup()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            setup()
            times.append(time.perf_counter() - t)
        out["leader set-up ms"] = 1e3 * statistics.median(times)
        setup_profile = _profiled(setup)
        backend = DeviceBackend(shards, k, n, 1.0 / n, method="int8")
        backend.start()
        out["first evaluation ms"] = 1e3 * backend.first_evaluation_seconds()
        out["later evaluations ms"] = 1e3 * backend.seconds_per_evaluation(20)
        backend.close()
    print(json.dumps(out))
    print("== holder export\n" + export_profile)
    print("== leader set-up\n" + setup_profile)
    out["profiles"] = {"holder export": export_profile, "leader set-up": setup_profile}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
