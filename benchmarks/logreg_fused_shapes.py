"""Logistic regression's fused forward product and softmax (``kernels/logreg/fused.cu``)
at several pipeline shapes, on one GPU without Dask, every output compared bit for bit
with the package's shape.

usage (GPU machine): python benchmarks/logreg_fused_shapes.py OUT.json [ROWS ...]

A shape is (bytes of a row per stage, stages, blocks per SM the registers must allow):
the package's (``fused.STAGE_BYTES``, ``fused.STAGES``, ``fused.MIN_BLOCKS``) first, then
the others of SHAPES.  How many blocks an SM holds follows from the shared memory each
takes (``blocks_per_sm``, from the kernel's occupancy), and a grid of more blocks than
the GPU holds at once runs in waves.  Random 8-bit rows of 784 features, 10 classes, at
26,250 (half of MNIST's training rows, a shard on each of two GPUs), 52,500 and 210,000
rows unless ROWS are given.  ms: the median of 7 means of 20 launches (CUDA events);
``equal``: the residual terms and the block sums are the package shape's bits.
"""
import json
import statistics
import sys
from pathlib import Path

import numpy as np

K, D = 10, 784
SHAPES = ((128, 2, 4), (64, 4, 4), (64, 3, 4), (64, 3, 5), (64, 2, 6))


def main() -> None:
    import cupy

    from mgpu_dask.kernels.cuda_source import source
    from mgpu_dask.kernels.logreg import fused
    from mgpu_dask.kernels.logreg.int8 import term_columns

    out_path = sys.argv[1]
    sizes = [int(a) for a in sys.argv[2:]] or [26_250, 52_500, 210_000]
    width = term_columns(K)
    text = source("mgpu_dask.kernels.logreg", "fused.cu")
    device = cupy.cuda.Device()
    res = {"gpu": cupy.cuda.runtime.getDeviceProperties(device.id)["name"].decode(),
           "sms": device.attributes["MultiProcessorCount"], "rows": sizes, "shapes": []}
    kernels = []
    for bk, stages, min_blocks in ((fused.STAGE_BYTES, fused.STAGES, fused.MIN_BLOCKS),
                                   *SHAPES):
        ring = stages * (fused.ROWS + width) * bk
        sums = -(-fused.ROWS * (width + 1) * 4 // 16) * 16
        shared = max(ring, sums + (K + 1) * fused.ROWS * 8)
        options = ("--std=c++17", f"-DCLASSES={K}", f"-DWIDTH={width}", f"-DBK={bk}",
                   f"-DSTAGES={stages}", f"-DMIN_BLOCKS={min_blocks}")
        kernel = cupy.RawModule(code=text, options=options).get_function("forward_softmax_i8")
        kernel.max_dynamic_shared_size_bytes = shared
        try:
            per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.ptr, fused.THREADS, shared)
        except AttributeError:
            per_sm = None
        kernels.append((kernel, shared))
        res["shapes"].append({"stage_bytes": bk, "stages": stages, "min_blocks": min_blocks,
                              "shared_bytes": shared, "registers": kernel.num_regs,
                              "local_bytes": kernel.local_size_bytes,
                              "blocks_per_sm": per_sm, "sizes": []})
    rng = np.random.default_rng(0)
    for n in sizes:
        n_pad = -(-n // 16) * 16
        blocks = -(-n // fused.ROWS)
        v = cupy.asarray(rng.integers(-128, 128, (n_pad, D), dtype=np.int8))
        w8 = cupy.asarray(rng.integers(-3, 4, (width, D), dtype=np.int8))
        colinfo = cupy.asarray(np.r_[np.full(K, 1e-4), rng.standard_normal(K) * 0.1])
        labels = cupy.asarray(rng.integers(0, K, n, dtype=np.int32))
        first = None
        for row, (kernel, shared) in zip(res["shapes"], kernels):
            resid8 = cupy.zeros((width, n_pad), dtype=np.int8)
            bpart = cupy.zeros((blocks, K + 1), dtype=np.float64)
            args = (v, np.int32(n_pad), np.int32(D), w8, colinfo, labels, np.int32(n), resid8,
                    np.int64(n_pad), bpart)
            for _ in range(3):
                kernel((blocks,), (fused.THREADS,), args, shared_mem=shared)
            means = []
            for _ in range(7):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                for _ in range(20):
                    kernel((blocks,), (fused.THREADS,), args, shared_mem=shared)
                end.record()
                end.synchronize()
                means.append(cupy.cuda.get_elapsed_time(start, end) / 20)
            got = (resid8[:, :n].get(), bpart.get())
            first = first or got
            equal = bool(np.array_equal(got[0], first[0]) and np.array_equal(got[1], first[1]))
            ms = statistics.median(means)
            row["sizes"].append({"rows": n, "blocks": blocks, "ms": round(ms, 4),
                                 "GB/s": round(n * D / ms / 1e6), "equal": equal})
            print(json.dumps({k: row[k] for k in ("stage_bytes", "stages", "min_blocks",
                                                  "registers", "local_bytes", "blocks_per_sm")}
                             | row["sizes"][-1]), flush=True)
    Path(out_path).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
