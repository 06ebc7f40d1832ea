"""The fused int8 KNN search (``kernels/knn/fused.cu``) against the tile loop, on one GPU
without Dask: the same neighbours on random 8-bit data of awkward shapes (ties
included), then ``local_candidates`` on MNIST at FRACTIONS (training and query rows
repeated), bf16 and int8 through the tile loop and int8 fused.

usage (GPU machine): python benchmarks/knn_fused.py OUT.json [FRACTION ...] [--shapes]
ms are medians of REPS calls; ``sha`` must agree within a fraction.  --shapes also
times the fused kernel's block shapes (training rows per tile, ring depth, blocks per
SM) at each fraction.
"""
import hashlib
import json
import statistics
import sys
import time

import numpy as np

REPS = 20
SHAPES = ((256, 4, 1), (256, 3, 1), (128, 4, 2), (128, 3, 2), (128, 2, 2))


def timed(call):
    """Median and least ms of REPS calls after three warm ones, and a hash of the last
    one's distances and indices."""
    import cupy

    for _ in range(3):
        out = call()
    cupy.cuda.Device().synchronize()
    t = []
    for _ in range(REPS):
        a = time.perf_counter()
        out = call()
        t.append(time.perf_counter() - a)
    return {"ms": round(1e3 * statistics.median(t), 3), "min": round(1e3 * min(t), 3),
            "sha": hashlib.sha1(out[:, :, :2].get().tobytes()).hexdigest()[:12]}


def main():
    import cupy
    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.kernels.knn import fused, operands
    from mgpu_dask.kernels.knn.search import local_candidates

    usable = fused.usable
    res = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": " ".join(["python"] + sys.argv), "checks": []}

    def run(Q, T, y, k, precision, allow_fused=True):
        fused.usable = usable if allow_fused else (lambda *a: False)
        train = operands.prepare_train(T, precision, True, 128)
        index = cupy.arange(T.shape[0], dtype=np.int64)
        return train, (lambda: local_candidates(Q, train, y, index, k))

    rng = np.random.default_rng(1)
    bad = 0
    for m, n, d, k, levels in ((1, 1, 1, 1, 256), (5, 7, 16, 3, 256), (130, 300, 17, 3, 4),
                               (257, 1000, 100, 10, 256), (300, 5000, 784, 3, 256),
                               (129, 777, 64, 64, 3), (1000, 3000, 48, 16, 2),
                               (64, 600, 784, 5, 256), (17, 20000, 33, 7, 256)):
        Q = cupy.asarray(rng.integers(0, levels, (m, d)).astype(np.uint8))
        T = cupy.asarray(rng.integers(0, levels, (n, d)).astype(np.uint8))
        y = cupy.asarray(rng.integers(0, 10, n).astype(np.int32))
        _, ref = run(Q, T, y, k, "bf16")
        train, new = run(Q, T, y, k, "int8")
        a, b = ref().get(), new().get()
        loop = next(iter(train.loops.values()))
        same = bool(np.array_equal(a, b))
        bad += not same
        res["checks"].append({"m": m, "n": n, "d": d, "k": k, "levels": levels, "same": same,
                              "fused": loop.fused is not None,
                              "splits": getattr(loop.fused, "splits", None)})
        print(res["checks"][-1], flush=True)

    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, seed=0)
    fractions = [int(f) for f in sys.argv[2:] if not f.startswith("--")] or [1, 4]
    for frac in fractions:
        Xtr, ytr, Xte = (np.concatenate([a] * frac) for a in (s.X_train, s.y_train, s.X_test))
        T, Q, y = cupy.asarray(Xtr), cupy.asarray(Xte), cupy.asarray(ytr.astype(np.int32))
        row = {"rows": [len(Xtr), len(Xte)]}
        for label, precision, allow in (("bf16", "bf16", True), ("int8_tiles", "int8", False),
                                        ("int8_fused", "int8", True), ("bf16_again", "bf16", True)):
            train, call = run(Q, T, y, 3, precision, allow)
            row[label] = timed(call)
            loop = next(iter(train.loops.values()))
            row[label].update(fused=loop.fused is not None,
                              splits=getattr(loop.fused, "splits", None))
            print(frac, label, row[label], flush=True)
            del train, loop
            cupy.get_default_memory_pool().free_all_blocks()
        res[f"fraction_{frac}"] = row
        if "--shapes" in sys.argv:
            shape = (fused.COLS, fused.STAGES, fused.MIN_BLOCKS)
            for cols, stages, blocks in SHAPES:
                fused.COLS, fused.STAGES, fused.MIN_BLOCKS = cols, stages, blocks
                label = f"cols{cols}_stages{stages}_blocks{blocks}"
                try:
                    train, call = run(Q, T, y, 3, "int8")
                    row[label] = timed(call)
                    del train
                except Exception as exc:
                    row[label] = f"{type(exc).__name__}: {exc}"[:300]
                print(frac, label, row[label], flush=True)
            fused.COLS, fused.STAGES, fused.MIN_BLOCKS = shape
    fused.usable = usable
    res["mismatches"] = bad
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
