"""Repeat the GPU candidate check over many seeds: which precision/method/tile
size/graph setting ever differs from the float64 reference, and whether a
failing seed fails again.

    python benchmarks/knn_stress.py --seeds 40 --json FILE
"""

from __future__ import annotations

import argparse
import json

import cupy
import numpy as np

from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn_products import prepare_train


def case(seed: int, m: int = 700, n: int = 5000, d: int = 80, k: int = 5) -> tuple:
    """Pixels against few-level training rows (many ties) and the exact k nearest."""
    rng = np.random.default_rng(seed)
    Q = rng.integers(0, 256, (m, d)).astype(np.uint8)
    T = rng.integers(0, 24, (n, d)).astype(np.uint8)
    y = rng.integers(0, 7, n).astype(np.int32)
    Qf, Tf = Q.astype(np.float64), T.astype(np.float64)  # integers: exact in float64
    ref = (Qf * Qf).sum(1)[:, None] + (Tf * Tf).sum(1)[None, :] - 2.0 * Qf @ Tf.T
    return Q, T, y, np.argsort(ref, axis=1, kind="stable")[:, :k]


def check(data: tuple, precision: str, method: str, tile_bytes: int | None, graph: bool,
          k: int = 5) -> list[int]:
    Q, T, y, order = data
    n = len(T)
    capture = K.TileLoop._capture
    if not graph:
        K.TileLoop._capture = lambda self: None
    try:
        train = prepare_train(cupy.asarray(T), precision, True, 128, method)
        cand = cupy.asnumpy(K.local_candidates(cupy.asarray(Q), train, cupy.asarray(y),
                                               cupy.arange(n, dtype=cupy.int64), k,
                                               tile_bytes=tile_bytes))
    finally:
        K.TileLoop._capture = capture
    bad = np.nonzero((cand[..., 1] != order).any(axis=1))[0]
    return [int(b) for b in bad]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    out = []
    for seed in range(args.seeds):
        data = case(seed)
        for precision in ("int8", "bf16"):
            for method in ("gemm", "direct"):
                for tile_bytes in (1 << 20, None):
                    for graph in (True, False):
                        bad = check(data, precision, method, tile_bytes, graph)
                        if bad:
                            again = check(data, precision, method, tile_bytes, graph)
                            row = {"seed": seed, "precision": precision, "method": method,
                                   "tile_bytes": tile_bytes, "graph": graph,
                                   "bad_rows": bad[:40], "n_bad": len(bad),
                                   "again_n_bad": len(again)}
                            out.append(row)
                            print(json.dumps(row), flush=True)
    print(f"{len(out)} failing settings of {args.seeds * 16}")
    with open(args.json, "w") as f:
        json.dump({"failures": out, "seeds": args.seeds}, f, indent=1)


if __name__ == "__main__":
    main()
