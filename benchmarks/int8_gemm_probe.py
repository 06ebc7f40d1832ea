"""Device time of logistic regression's int8 tensor-core products, both orientations.

For MNIST-shaped rows (n x 784 int8, 10 classes in WIDTH term columns) on GPU 0,
median of 50 runs timed with CUDA events (``kernels._launch.bound_int8_gemm``):

- forward, rows-out: ``(n x width) = v @ w8^T`` and width-out: ``(width x n) = w8 @ v^T``;
- gradient, per row block of ROWS (int32 sums exact up to 131,072 rows):
  ``(blocks x 784 x width)`` and ``(blocks x width x 784)``.

    python benchmarks/int8_gemm_probe.py --json FILE [--rows 52500,210000,4068750]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from logreg_eval_probe import median_ms  # this folder: the scripts run as files


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--rows", default="52500,210000,4068750")
    ap.add_argument("--widths", default="32,48")
    ap.add_argument("--blocks", default="4096,16384,65536")
    args = ap.parse_args()
    import cupy

    from mgpu_dask.kernels._launch import bound_int8_gemm

    stream = cupy.cuda.Stream(non_blocking=True)
    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": "python " + " ".join(sys.argv), "rows": []}
    d = 784
    for n in (int(r) for r in args.rows.split(",")):
        n_pad = -(-n // 65536) * 65536
        v = cupy.random.randint(-128, 128, (n_pad, d), dtype=np.int8)
        vt = cupy.ascontiguousarray(v.T)
        row = {"rows": n, "gbytes_of_v": n * d / 1e9}
        for width in (int(w) for w in args.widths.split(",")):
            w8 = cupy.random.randint(-127, 128, (width, d), dtype=np.int8)
            r8 = cupy.random.randint(-127, 128, (width, n_pad), dtype=np.int8)
            logits = cupy.empty(n_pad * width, dtype=np.int32)
            with cupy.cuda.Device(0):
                def timed(gemm):
                    return median_ms(stream, gemm, warm_up=True)

                row[f"w{width} forward rows-out ms"] = timed(
                    bound_int8_gemm(logits, w8, v, d, stream))
                row[f"w{width} forward width-out ms"] = timed(
                    bound_int8_gemm(logits, v, w8, d, stream))
                for block in (int(b) for b in args.blocks.split(",")):
                    blocks = n_pad // block
                    g = cupy.empty(blocks * d * width, dtype=np.int32)
                    row[f"w{width} gradient b{block} d-by-width ms"] = timed(
                        bound_int8_gemm(g, r8, vt, block, stream, batches=blocks))
                    row[f"w{width} gradient b{block} width-by-d ms"] = timed(
                        bound_int8_gemm(g, vt, r8, block, stream, batches=blocks))
            # the exactness of one forward product against int64 NumPy, on a slice
            a = (w8.get().astype(np.int64) @ v[:512].get().T.astype(np.int64))
            bound_int8_gemm(logits, v[:512], w8, d, stream)()
            stream.synchronize()
            row[f"w{width} forward exact"] = bool(
                (logits[: width * 512].reshape(width, 512).get() == a).all())
        out["rows"].append(row)
        print({k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()},
              flush=True)
        del v, vt
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
