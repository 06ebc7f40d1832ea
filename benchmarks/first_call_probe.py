"""What the first KNN block costs in a fresh GPU process, and why (device machine).

Times import, CUDA context, the training block's preparation and the first
and second ``_replicated_block`` calls on MNIST-sized uint8 data, with a
cProfile of the first call (the cold share of a new worker's first predict).
Usage: python benchmarks/first_call_probe.py [precision] [preload]
("preload" imports mgpu_dask.worker_imports first, as the fork server does).
"""

import cProfile
import pstats
import sys
import time

t0 = time.perf_counter()
if "preload" in sys.argv[2:]:
    import mgpu_dask.worker_imports  # noqa: F401
import cupy  # noqa: E402
import numba.cuda  # noqa: E402,F401
import numpy as np  # noqa: E402

marks = {"imports": time.perf_counter() - t0}
s = time.perf_counter()
cupy.cuda.Device(0).use()
cupy.empty(1)
cupy.cuda.Device(0).synchronize()
marks["context"] = time.perf_counter() - s
s = time.perf_counter()
from mgpu_dask import knn_plans  # noqa: E402

marks["import mgpu_dask.knn_plans"] = time.perf_counter() - s
precision = sys.argv[1] if len(sys.argv) > 1 else "bf16"
rng = np.random.default_rng(0)
X = rng.integers(0, 256, (52_500, 784), dtype=np.uint8)
Q = cupy.asarray(rng.integers(0, 256, (8_750, 784), dtype=np.uint8))
y = cupy.asarray(rng.integers(0, 10, 52_500).astype(np.int32))
prep = knn_plans.Prep(precision, True, 128, "gemm")


def timed(name, fn, *args, profile=False):
    prof = cProfile.Profile() if profile else None
    s = time.perf_counter()
    if prof:
        prof.enable()
    out = fn(*args)
    cupy.cuda.Device(0).synchronize()
    if prof:
        prof.disable()
    marks[name] = time.perf_counter() - s
    if prof:
        print(f"--- profile of {name}")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return out


train = timed("prepare train (first)", knn_plans._prepare_host, X, "gpu", prep, profile=True)
vote = (10, "distance", None)
timed("first block", knn_plans._replicated_block, Q, train, y, 3, 8, None, vote, profile=True)
timed("second block", knn_plans._replicated_block, Q, train, y, 3, 8, None, vote)
print({k: round(v, 4) for k, v in marks.items()})
