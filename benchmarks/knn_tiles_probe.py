"""Tile shape of our KNN loop against the CUDA C row's, on GPU 0 (no Dask).

Our tile loop folds each product tile into the running top-k while the tile
is in L2 (tiles of TILE_L2_SHARE x L2 bytes, at most TILE_COLS training
columns); the cuda-c backend multiplies all query rows by a slice of training
rows (512 MiB tiles, through HBM) and scans each row with one warp.  At
fraction 4 the cuda-c row's predict was faster than ours (81 vs 120 ms on one
H200, round 7), so this probe times, on the same prepared operands (bf16 on
8-bit data), our loop for a grid of tile shapes and the cuda-c candidates,
each the median of ``--repeats`` after a warm-up, and checks that every
setting finds the same neighbours.

    python benchmarks/knn_tiles_probe.py --data-dir DIR --fraction 4 --json FILE
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from knn_kernels import timed  # this folder: the scripts run as files

from mgpu_dask.data import load_dataset, split
from mgpu_dask.kernels import cuda_c
from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn_products import TileProduct, prepare_queries, prepare_train


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--json")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--fraction", type=float, default=4.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shares", default="1,2,4,8,16")
    p.add_argument("--cols", default="4096,8192,16384,32768")
    a = p.parse_args()
    ds = load_dataset("mnist", data_dir=a.data_dir)
    s = split(ds.X, ds.y, test_size=0.25, seed=0, fraction=a.fraction)
    X, Q = cp.asarray(s.X_train), cp.asarray(s.X_test)
    labels = cp.asarray(s.y_train.astype(np.int32))
    index = cp.arange(len(s.y_train), dtype=np.int64)
    train = prepare_train(X, "bf16", True, 128)
    k, m, n = a.k, int(Q.shape[0]), train.n
    out = {"machine": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "l2_bytes": int(cp.cuda.Device().attributes["L2CacheSize"]),
           "shape": [m, n, int(X.shape[1])], "k": k, "rows": []}

    def neighbours(cand):
        return cp.asnumpy(cand[:, :, 1]).astype(np.int64)

    reference = None
    for share in [float(x) for x in a.shares.split(",")]:
        for cols in [int(x) for x in a.cols.split(",")]:
            K.TILE_L2_SHARE, K.TILE_COLS["gpu"] = share, cols
            train.loops.clear()
            seconds = timed(lambda: K.local_candidates(Q, train, labels, index, k), a.repeats)
            loop = next(iter(train.loops.values()))
            got = neighbours(K.local_candidates(Q, train, labels, index, k))
            if reference is None:
                reference = got
            row = {"method": "ours", "l2_share": share, "tile_cols": cols,
                   "tiles": list(loop.tiles), "ms": round(1e3 * seconds, 2),
                   "same_neighbours": bool((got == reference).all())}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            train.loops.clear()
            cp.get_default_memory_pool().free_all_blocks()

    queries = prepare_queries(Q, train)
    for tile_mib in (128, 512, 2048):
        step = cuda_c.tile_step(m, n, tile_mib << 20)
        product = TileProduct(queries.operand, train, m * step)

        def cuda_c_candidates(product=product, step=step):
            return cuda_c.candidates_by(lambda c0, w: product(0, m, c0, w), m, n, train.norms,
                                        k, step)

        seconds = timed(cuda_c_candidates, a.repeats)
        _, cols = cuda_c_candidates()
        row = {"method": "cuda-c", "tile_mib": tile_mib, "step": step,
               "ms": round(1e3 * seconds, 2),
               "same_neighbours": bool((cp.asnumpy(cols).astype(np.int64) == reference).all())}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        product = None
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
