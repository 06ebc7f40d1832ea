"""Logistic regression's fused forward product and softmax (``kernels/logreg/fused.cu``):
an older commit's kernel against this tree's at several pipeline shapes, on one GPU
without Dask, with every output compared bit for bit.

usage (GPU machine): python benchmarks/logreg_fused_sweep.py OUT.json OLD_ROOT [ROWS ...]

OLD_ROOT holds the older package (``git archive REF mgpu_dask | tar -x -C OLD_ROOT``);
its kernel runs one block per 128-row tile, as it did.  This tree's kernel runs
MIN_BLOCKS blocks per SM, each taking tiles in turn; it is timed at its defaults and at
other (stage bytes, stages, blocks per SM).  Random 8-bit rows of 784 features, 10
classes, at MNIST's 52,500 training rows and x4's 210,000 unless ROWS are given.  ms:
the mean of 20 launches after 3, timed by CUDA events; ``equal``: the residual terms
and the block sums are the old kernel's bits.
"""
import json
import sys
from pathlib import Path

import numpy as np

K, D, WIDTH, BM, THREADS = 10, 784, 48, 128, 256
SHAPES = ((128, 2, 2), (128, 3, 2), (64, 4, 2), (64, 6, 2))


def source(root: Path) -> str:
    kernels = root / "mgpu_dask" / "kernels"
    return (kernels / "mma.cuh").read_text() + "\n" + (kernels / "logreg" / "fused.cu").read_text()


def shared(bk: int, stages: int, persistent: bool) -> int:
    ring = stages * (BM + WIDTH) * bk
    sums = -(-BM * (WIDTH + 1) * 4 // 16) * 16
    parts = (K + 1) * BM * 8
    return ring + sums + parts if persistent else max(ring, sums + parts)


def main() -> None:
    import cupy

    out_path, old_root = sys.argv[1], Path(sys.argv[2])
    sizes = [int(a) for a in sys.argv[3:]] or [52_500, 210_000]
    here = Path(__file__).resolve().parents[1]
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    rng = np.random.default_rng(0)
    variants = [("old (one block a tile)", source(old_root), (128, 3, 3), False)]
    variants += [(f"tiles in turn, {bk} B x {st} stages, {mb} blocks/SM", source(here),
                  (bk, st, mb), True) for bk, st, mb in SHAPES]
    res = {"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
           "rows": sizes, "variants": []}
    for name, _, (bk, st, mb), persistent in variants:
        res["variants"].append({"variant": name, "stage_bytes": bk, "stages": st,
                                "blocks_per_sm": mb, "shared_bytes": shared(bk, st, persistent),
                                "sizes": []})
    kernels = {}
    for n in sizes:
        n_pad = -(-n // 16) * 16
        tiles = -(-n // BM)
        v = cupy.asarray(rng.integers(-128, 128, (n_pad, D), dtype=np.int8))
        w8 = cupy.asarray(rng.integers(-3, 4, (WIDTH, D), dtype=np.int8))
        colinfo = cupy.asarray(np.r_[np.full(K, 1e-4), rng.standard_normal(K) * 0.1])
        labels = cupy.asarray(rng.integers(0, K, n, dtype=np.int32))
        first = None
        for row, (name, text, (bk, st, mb), persistent) in zip(res["variants"], variants):
            options = ("--std=c++17", f"-DCLASSES={K}", f"-DWIDTH={WIDTH}", f"-DBK={bk}",
                       f"-DSTAGES={st}", f"-DMIN_BLOCKS={mb}")
            if row["variant"] not in kernels:
                kernels[row["variant"]] = cupy.RawModule(code=text, options=options) \
                    .get_function("forward_softmax_i8")
                kernels[row["variant"]].max_dynamic_shared_size_bytes = row["shared_bytes"]
            kernel = kernels[row["variant"]]
            resid8 = cupy.zeros((WIDTH, n_pad), dtype=np.int8)
            bpart = cupy.zeros((tiles, K + 1), dtype=np.float64)
            grid = min(tiles, mb * sms) if persistent else tiles
            args = (v, np.int32(n_pad), np.int32(D), w8, colinfo, labels, np.int32(n), resid8,
                    np.int64(n_pad), bpart)

            def launch():
                kernel((grid,), (THREADS,), args, shared_mem=row["shared_bytes"])
            for _ in range(3):
                launch()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for _ in range(20):
                launch()
            end.record()
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end) / 20
            got = (resid8[:, :n].get(), bpart.get())
            if first is None:
                first = got
            equal = bool(np.array_equal(got[0], first[0]) and np.array_equal(got[1], first[1]))
            row["sizes"].append({"rows": n, "grid": grid, "ms": round(ms, 4),
                                 "GB/s": round(n * D / ms / 1e6), "equal": equal})
            print(json.dumps({"variant": row["variant"], **row["sizes"][-1]}), flush=True)
    Path(out_path).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
