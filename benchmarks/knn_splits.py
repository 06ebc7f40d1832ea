"""The fused KNN search (``kernels/knn/fused.py``) at each count of training-row splits,
beside the count :func:`fused.splits` picks, on MNIST's rows at the shapes the CLI's
runs give one GPU and each of two (queries x training rows; the training rows are
MNIST's repeated, as ``--fraction 4`` and the deformed copies' sizes have them).

usage (GPU machine, MNIST in MGPU_DASK_DATA_DIR): python benchmarks/knn_splits.py OUT.json

ms: the search and its merge, the mean of 10 launches after 3, timed by CUDA events.
Every split count must give the same keys and columns (``same``).
"""
import json
import sys

import numpy as np
from knn_fused_builds import timed  # this folder: python puts a script's own first

ALTERNATIVES = (1.5, 4, 8, 12, 16)  # start-ups in tiles to try: the splits each picks
SHAPES = ((17500, 52500), (8750, 52500), (70000, 210000), (35000, 210000),
          (17500, 8_137_500), (8750, 4_068_750))


def main():
    import cupy

    from mgpu_dask.data import load_dataset
    from mgpu_dask.kernels.knn import fused
    from mgpu_dask.kernels.knn.operands import (operand_dtype, padded_shape, prepare_queries,
                                                prepare_train)

    X = load_dataset("mnist").X
    rng = np.random.default_rng(0)
    optin, sms, _ = fused._device()
    res = {"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
           "rows": []}
    real_splits = fused.splits
    for m, n in SHAPES:
        order = rng.permutation(len(X))
        Q = cupy.asarray(np.resize(X[order], (m, X.shape[1])))
        T = cupy.asarray(np.resize(X[order], (n, X.shape[1])))
        train = prepare_train(T, "int8", True, 128)
        del T
        q = cupy.zeros(padded_shape(m, 784), dtype=operand_dtype(train.precision, True))
        prepare_queries(Q, train, out=q)
        tiles = -(-n // fused.COLS)
        build = fused.build_for(3, 784, fused._device()[2], optin)
        res["start_tiles"] = build.start_tiles
        picked = real_splits(-(-m // fused.ROWS), tiles, sms * build.min_blocks, build.start_tiles)
        big = n > 1_000_000
        near = (-2, -1, 1, 2) if big else (-4, -2, -1, 1, 2, 4)
        others = {}  # what each start-up in tiles would pick
        for start_tiles in ALTERNATIVES:
            others[start_tiles] = real_splits(-(-m // fused.ROWS), tiles, sms * build.min_blocks,
                                              start_tiles)
        tries = sorted({picked, *others.values(), *(max(1, picked + d) for d in near)})
        ref = None
        for s in tries:
            fused.splits = lambda *args, s=s: s
            search = fused.FusedTopK(q, train, m, 3)
            ms = timed(search)
            got = (search.keys.get(), search.cols.get())
            ref = got if ref is None else ref
            row = {"queries": m, "train": n, "splits": s, "picked": s == picked,
                   "picked at start tiles": [t for t, o in others.items() if o == s],
                   "waves": -(-(-(-m // fused.ROWS) * s) // (sms * build.min_blocks)),
                   "ms": round(ms, 3), "build": search.build.label,
                   "same": bool(np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]))}
            res["rows"].append(row)
            print(row, flush=True)
            del search
        fused.splits = real_splits
        del train, q, Q
        cupy.get_default_memory_pool().free_all_blocks()
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
