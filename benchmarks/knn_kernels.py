"""Single-GPU KNN kernels on MNIST (seed protocol), per precision, against PyTorch.

On GPU 0, no Dask, data resident, CUDA events, median of repeats after a
warm-up, for each precision of our pipeline (prepared queries, tiled product,
running top-k, vote, predictions to the host):

  - the whole predict; the tile loop alone (queries prepared, one graph
    replay of every tile's product and running top-k); the products alone,
    issued tile by tile (so the top-k's share of the product time is known);
  - the 20-line PyTorch script users would write instead (fp32 GEMM, topk,
    distance-weighted vote, predictions to the host; query slices where the
    whole distance matrix would not fit);

then counts, per precision, the predictions that differ from scikit-learn's
brute-force classifier (fraction 1; at fraction 4 from our int8 run).

    python benchmarks/knn_kernels.py --data-dir DIR [--fraction 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy as cp
import numpy as np

from mgpu_dask.data import load_dataset, split
from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn_products import prepare_train


def timed(fn, repeats=7):
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ours(Q, train, y, index, k):
    cand = K.local_candidates(Q, train, y, index, k)
    return cp.asnumpy(K.vote(cand, 10, "distance")[1])


def loop_only(Q, train, k):
    """Query preparation and the tile loop (a graph replay on a GPU), nothing after."""
    loop = K._tile_loop(train, Q.shape[0], k, True, None)
    loop.follow()
    with loop.on_stream():
        loop(Q)
    loop.stream.synchronize()
    return loop


def product_only(Q, train, k):
    """The cuBLAS products of the same tiles, issued one by one from Python."""
    loop = K._tile_loop(train, Q.shape[0], k, True, None)
    tq, tn = loop.tiles
    m_pad, n_pad = loop.q.shape[0], train.operand.shape[0]
    with loop.on_stream():
        for q0 in range(0, Q.shape[0], tq):
            for t0 in range(0, train.n, tn):
                loop.product(q0, min(tq, m_pad - q0), t0, min(tn, n_pad - t0))
    loop.stream.synchronize()


def torch_script(X_train, y_train, X_test, k, rows=8192):
    """What a user writes in PyTorch: fp32 GEMM + topk + weighted vote, predictions to host."""
    import torch

    T = torch.tensor(X_train, device="cuda", dtype=torch.float32)
    y = torch.tensor(y_train, device="cuda", dtype=torch.int64)
    Qall = torch.tensor(X_test, device="cuda", dtype=torch.float32)
    tn = (T * T).sum(1)

    def run():
        out = []
        for start in range(0, Qall.shape[0], rows):
            Q = Qall[start:start + rows]
            d = (Q * Q).sum(1, keepdim=True) + tn - 2.0 * Q @ T.T
            dist, idx = d.topk(k, largest=False)
            w = 1.0 / dist.clamp_min(1e-12).sqrt()
            votes = torch.zeros(Q.shape[0], 10, device="cuda").scatter_add_(1, y[idx], w)
            out.append(votes.argmax(1))
        return torch.cat(out).cpu().numpy()

    def timed_torch():
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    return timed_torch(), run()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--json")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--precisions", default="int8,bf16,tf32,fp32")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y, test_size=0.25, seed=0, fraction=args.fraction)
    Q = cp.asarray(s.X_test)                       # uint8, as the shards hold them
    y = cp.asarray(s.y_train, dtype=cp.int32)
    index = cp.arange(len(s.X_train), dtype=cp.int64)
    k = args.k
    dev = cp.cuda.Device()
    out = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "l2_bytes": int(dev.attributes["L2CacheSize"]), "fraction": args.fraction,
           "n_train": int(len(s.X_train)), "n_test": int(len(s.X_test)), "k": k,
           "command": "python benchmarks/knn_kernels.py " + " ".join(
               f"--{a.replace('_', '-')} {v}" for a, v in vars(args).items()
               if v not in (None, False) and a not in ("data_dir", "json")),
           "precisions": {}}
    preds = {}
    for precision in args.precisions.split(","):
        train = prepare_train(cp.asarray(s.X_train), precision, True, 128)
        total = timed(lambda: ours(Q, train, y, index, k), 5)
        loop = timed(lambda: loop_only(Q, train, k), 5)
        product = timed(lambda: product_only(Q, train, k), 5)
        preds[precision] = ours(Q, train, y, index, k)
        ops = 2.0 * len(s.X_test) * len(s.X_train) * s.X_train.shape[1]
        tiles = K._tile_loop(train, Q.shape[0], k, True, None)
        out["precisions"][precision] = {
            "predict_s": total, "tile_loop_s": loop, "product_s": product,
            "product_tops": ops / product / 1e12,
            "topk_over_product": (loop - product) / product,
            "tiles": list(tiles.tiles), "graph": tiles.graph is not None,
            "graph_note": tiles.graph_note,
            "accuracy": float((preds[precision] == s.y_test).mean()),
        }
        print(precision, json.dumps(out["precisions"][precision]), flush=True)
        train = None  # free its GPU memory before the next precision
        cp.get_default_memory_pool().free_all_blocks()
    if not args.no_torch:
        t, pred = torch_script(s.X_train, s.y_train, s.X_test, k)
        out["torch_script"] = {"predict_s": t, "accuracy": float((pred == s.y_test).mean())}
        print("torch", json.dumps(out["torch_script"]), flush=True)
    if args.fraction <= 1:
        from sklearn.neighbors import KNeighborsClassifier

        started = time.perf_counter()
        sk = KNeighborsClassifier(k, weights="distance", algorithm="brute", n_jobs=-1).fit(
            s.X_train.astype(np.float64), s.y_train).predict(s.X_test.astype(np.float64))
        out["sklearn"] = {"seconds": time.perf_counter() - started,
                          "accuracy": float((sk == s.y_test).mean())}
        reference = sk
    else:
        reference = preds[next(iter(preds))]
    for precision, pred in preds.items():
        out["precisions"][precision]["differ_from_reference"] = int((pred != reference).sum())
    out["reference"] = "scikit-learn brute force" if args.fraction <= 1 else "first precision"
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
