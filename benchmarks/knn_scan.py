"""The KNN search on one GPU without Dask (``local_candidates`` on MNIST), the scan's
variants side by side: products only, and running lists / threads per row.

usage (GPU machine): python benchmarks/knn_scan.py OUT.json [FRACTION]
Every variant must find the same neighbours (``sha``); ms are medians of 20.
"""
import json, statistics, sys, time
import numpy as np

def main():
    import cupy
    from numba import cuda, float64, int32
    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.kernels.knn import cuda as ck, search, operands
    from mgpu_dask.kernels.knn.search import local_candidates
    ds = load_dataset("mnist"); s = split(ds.X, ds.y, seed=0)
    frac = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    Xtr = np.concatenate([s.X_train] * int(frac)) if frac >= 2 else s.X_train
    ytr = np.concatenate([s.y_train] * int(frac)) if frac >= 2 else s.y_train
    Xte = np.concatenate([s.X_test] * int(frac)) if frac >= 2 else s.X_test
    T = cupy.asarray(Xtr); Q = cupy.asarray(Xte); y = cupy.asarray(ytr.astype(np.int32))
    index = cupy.arange(len(ytr), dtype=np.int64)
    orig = (ck.scan_tile, ck.ROW_THREADS, search.Scan.__call__, ck.scan_tile_short)

    def make(list_len, threads):
        @cuda.jit
        def kern(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K):
            lv = cuda.shared.array((threads, list_len), float64)
            li = cuda.shared.array((threads, list_len), int32)
            sh_v = cuda.shared.array(threads, float64)
            sh_i = cuda.shared.array(threads, int32)
            ck._scan_body(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys,
                          cols, K, lv, li, sh_v, sh_i, threads)
        return kern

    def timed(label, precision, setup=None, reps=20):
        try:
            return _timed(label, precision, setup, reps)
        except Exception as exc:
            print(label, "FAILED", type(exc).__name__, str(exc)[:300], flush=True)
            return str(exc)[:300]

    def _timed(label, precision, setup=None, reps=20):
        ck.scan_tile, ck.ROW_THREADS, search.Scan.__call__, ck.scan_tile_short = orig
        if setup: setup()
        train = operands.prepare_train(T, precision, True, 128)
        for _ in range(3):
            out = local_candidates(Q, train, y, index, 3)
        cupy.cuda.Device().synchronize()
        t = []
        for _ in range(reps):
            a = time.perf_counter(); out = local_candidates(Q, train, y, index, 3); t.append(time.perf_counter() - a)
        ms = round(1e3 * statistics.median(t), 3)
        r = {"ms": ms, "min": round(1e3 * min(t), 3), "sha": hash(out[:, :, 1].get().tobytes()) % 10**8}
        print(label, r, flush=True)
        return r

    res = {"rows": [len(Xtr), len(Xte)]}
    res["bf16"] = timed("bf16", "bf16")
    res["int8"] = timed("int8", "int8")
    def products_only():
        search.Scan.__call__ = lambda self, *a: None
    res["bf16_products_only"] = timed("bf16 products only", "bf16", products_only)
    res["int8_products_only"] = timed("int8 products only", "int8", products_only)
    for L, th in ((4, 128), (4, 256), (4, 64), (16, 64)):
        def var(L=L, th=th):
            ck.scan_tile = ck.scan_tile_short = make(L, th); ck.ROW_THREADS = th
        res[f"bf16_list{L}_threads{th}"] = timed(f"bf16 list {L} threads {th}", "bf16", var)
    res["bf16_again"] = timed("bf16 again", "bf16")
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))

if __name__ == "__main__":
    main()
