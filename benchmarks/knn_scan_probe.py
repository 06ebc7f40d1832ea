"""Where the KNN tile loop's time goes, on GPU 0 (MNIST, int8).

Prints, with CUDA events: one tile's product; one scan of a tile in three
regimes (nothing beats the running list; a realistic loop; every row
merging); the Python-issued loop and its graph replay; whether each launch
path is the fast one.  Run under ``ncu`` for the scan kernel's counters.

    python benchmarks/knn_scan_probe.py --data-dir DIR [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import cupy as cp
import numpy as np

from mgpu_dask.data import load_dataset, split
from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn_products import prepare_train


def per_call(fn, n=50):
    fn()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    host = time.perf_counter()
    start.record()
    for _ in range(n):
        fn()
    stop.record()
    issued = time.perf_counter() - host
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / n * 1e3, issued / n * 1e6  # us GPU, us host


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--json")
    p.add_argument("--precision", default="int8")
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y, test_size=0.25, seed=0)
    Q = cp.asarray(s.X_test)
    train = prepare_train(cp.asarray(s.X_train), args.precision, True, 128)
    out = {"precision": args.precision}
    loop = K._tile_loop(train, Q.shape[0], 3, True, None)
    out["tiles"] = loop.tiles
    out["graph"] = loop.graph is not None
    out["graph_note"] = loop.graph_note
    out["scan_launch_fast"] = loop.scan._launch._fast
    out["scan_launch_why"] = getattr(loop.scan._launch, "why", None)
    tq, tn = loop.tiles
    with loop.on_stream():
        loop(Q)
        loop.stream.synchronize()
        keys = loop.scan.keys
        final = keys.copy()
        out["product_tile_us"] = per_call(lambda: loop.product(0, tq, 0, tn))
        keys[...] = -np.inf  # nothing gets in: the streaming cost alone
        out["scan_nothing_in_us"] = per_call(lambda: loop.scan(tq, tn, 0, 0))
        keys[...] = final    # the running lists at the end: a late tile's cost
        out["scan_late_tile_us"] = per_call(lambda: loop.scan(tq, tn, 0, 0))

        def first_tile():
            keys.fill(np.inf)
            loop.scan(tq, tn, 0, 0)

        fill = per_call(lambda: keys.fill(np.inf))
        first = per_call(first_tile)
        out["scan_first_tile_us"] = (first[0] - fill[0], first[1])
        out["tile_loop_python_us"] = per_call(loop._tiles, 5)
        if loop.graph is not None:
            out["tile_loop_graph_us"] = per_call(lambda: loop.graph.launch(loop.stream), 5)
    out["n_tiles"] = -(-Q.shape[0] // tq) * -(-train.n // tn)
    shapes = {}
    for precision in ("int8", "bf16"):
        other = prepare_train(cp.asarray(s.X_train), precision, True, 128)
        for cols, share in ((4096, 0.5), (2048, 0.5), (8192, 0.5), (4096, 1.0), (8192, 2.0)):
            K.TILE_COLS["gpu"], K.TILE_L2_SHARE = cols, share
            tiles = K.TileLoop(other, Q.shape[0], 3, True, None)
            tiles.follow()
            with tiles.on_stream():
                tiles(Q)
                replay = per_call(lambda: tiles.graph.launch(tiles.stream), 5)
                tq, tn = tiles.tiles
                product = per_call(lambda: tiles.product(0, tq, 0, tn), 20)
            shapes[f"{precision} {tq}x{tn}"] = {"loop_ms": replay[0] / 1e3,
                                               "product_tile_us": product[0],
                                               "tiles": -(-Q.shape[0] // tq) * -(-train.n // tn)}
            print(precision, tq, tn, shapes[f"{precision} {tq}x{tn}"], flush=True)
            tiles = None
        other = None
    out["shapes"] = shapes
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
