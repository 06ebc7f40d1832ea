"""Single-GPU KNN kernel benchmark and correctness check on MNIST (seed protocol).

Times, on GPU 0 with CUDA events (median of repeats, after warm-up):
  - the plain CuPy baseline: GEMM + argpartition + vote (the seed's CuPy script);
  - our local_candidates with method "gemm" (cuBLAS + our top-k/refine) and
    "direct" (our tiled kernel), for the whole test set and for a 1/4 share;
  - our vote kernel.
Then compares our predictions with scikit-learn's brute-force classifier and
counts the differences that exact ties explain.

    python benchmarks/knn_kernels.py --data-dir DIR [--json FILE]
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


def timed(fn, repeats=10):
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1000)
    return statistics.median(times)


def cupy_baseline(Q, T, y, k):
    d = (Q * Q).sum(1)[:, None] + (T * T).sum(1)[None, :] - 2 * Q @ T.T
    idx = cp.argpartition(d, k, axis=1)[:, :k]
    dist = cp.sqrt(cp.maximum(cp.take_along_axis(d, idx, 1), 0))
    w = 1.0 / cp.maximum(dist, 1e-12)
    votes = cp.zeros((Q.shape[0], 10))
    cp.add.at(votes, (cp.arange(Q.shape[0])[:, None], y[idx]), w)
    return votes.argmax(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--json")
    p.add_argument("--k", type=int, default=3)
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y, test_size=0.25, seed=0)
    Q = cp.asarray(s.X_test, dtype=cp.float32)
    T = cp.asarray(s.X_train, dtype=cp.float32)
    y = cp.asarray(s.y_train, dtype=cp.int32)
    index = cp.arange(T.shape[0], dtype=cp.int64)
    norms = K.row_norms(T)
    k = args.k
    out = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "n_train": int(T.shape[0]), "n_test": int(Q.shape[0]), "k": k}
    flops = 2.0 * Q.shape[0] * T.shape[0] * T.shape[1]
    out["cupy_baseline_s"] = timed(lambda: cupy_baseline(Q, T, y, k), 5)
    out["cublas_sgemm_only_s"] = timed(lambda: Q @ T.T, 10)
    for method in ("gemm", "direct"):
        for share, rows in (("all", Q.shape[0]), ("quarter", Q.shape[0] // 4)):
            Qs = Q[:rows]
            t = timed(lambda: K.local_candidates(Qs, T, y, index, k, method=method, norms=norms), 5)
            out[f"{method}_{share}_s"] = t
            out[f"{method}_{share}_tflops"] = flops * rows / Q.shape[0] / t / 1e12
    D = Q[: Q.shape[0] // 4] @ T.T
    out["topk_quarter_s"] = timed(lambda: K.topk(D, k + 8, alpha=-2.0, beta=norms), 10)
    out["sqdist_tiled_quarter_s"] = timed(lambda: K.sqdist(Q[: Q.shape[0] // 4], T), 5)
    cand = K.local_candidates(Q, T, y, index, k, norms=norms)
    out["vote_all_s"] = timed(lambda: K.vote(cand, 10, "distance"), 10)
    pred = cp.asnumpy(K.vote(cand, 10, "distance")[1])
    direct = cp.asnumpy(K.vote(K.local_candidates(Q, T, y, index, k, method="direct"), 10)[1])
    base = cp.asnumpy(cupy_baseline(Q, T, y, k))
    # exact ties: the k-th and (k+1)-th exact distances are equal
    wide = cp.asnumpy(K.local_candidates(Q, T, y, index, k + 1, norms=norms))
    tied = wide[:, k - 1, 0] == wide[:, k, 0]
    from sklearn.neighbors import KNeighborsClassifier

    started = time.perf_counter()
    sk = KNeighborsClassifier(k, weights="distance", algorithm="brute", n_jobs=-1).fit(
        s.X_train.astype(np.float64), s.y_train).predict(s.X_test.astype(np.float64))
    out["sklearn_brute_s"] = time.perf_counter() - started
    diff = pred != sk
    out.update({"accuracy_ours": float((pred == s.y_test).mean()),
                "accuracy_sklearn": float((sk == s.y_test).mean()),
                "accuracy_cupy_baseline": float((base == s.y_test).mean()),
                "differs_from_sklearn": int(diff.sum()),
                "differs_and_tied": int((diff & tied).sum()),
                "tied_queries": int(tied.sum()),
                "gemm_equals_direct": bool((pred == direct).all())})
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
