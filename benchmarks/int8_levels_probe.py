"""What turning a shard's rows into int8 levels costs (device machine): the conversion of
uint8 rows (top bit flipped, four bytes at a time) and of float32 rows (the checking
kernel), and the transpose, at several row counts, in GB/s of bytes read and written.

Usage: python benchmarks/int8_levels_probe.py [--rows 1000000,4000000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import cupy
import numpy as np

from knn_kernels import timed as seconds  # this folder: the scripts run as files
from mgpu_dask.kernels import logreg_cuda as C
from mgpu_dask.kernels import logreg_int8
from mgpu_dask.kernels._launch import launch
from mgpu_dask.kernels.logreg import converted_levels


def measure(n: int, d: int) -> dict:
    """One row count: each step's median seconds, bytes per second, and whether uint8 rows
    and their float32 copy / 255 give the same levels."""
    device = cupy.cuda.Device()
    pixels = cupy.random.randint(0, 256, (n, d), dtype=cupy.uint8)
    floats = pixels.astype(cupy.float32) * cupy.float32(1 / 255)
    v = cupy.empty((n, d), dtype=cupy.int8)
    vt = cupy.empty((d, n), dtype=cupy.int8)
    row = {"rows": n, "d": d}
    row["uint8 shift s"] = seconds(lambda: logreg_int8._shifted_bytes(pixels, v))
    row["uint8 kernel s"] = seconds(
        lambda: converted_levels(device, C.to_int8_levels, pixels, 1.0, v))
    row["float32 kernel s"] = seconds(
        lambda: converted_levels(device, C.to_int8_levels, floats, 1 / 255, v))
    row["transpose_bytes s"] = seconds(lambda: launch(
        C.transpose_bytes, *C.transpose_grid(n, d), v.view(np.uint32), vt.view(np.uint32)))
    row["levels() uint8 s"] = seconds(lambda: logreg_int8.levels(pixels, scale=1 / 255))
    row["levels() float32 s"] = seconds(lambda: logreg_int8.levels(floats))
    nbytes = n * d
    row["GB/s"] = {"uint8 shift": 2 * nbytes / row["uint8 shift s"] / 1e9,
                   "uint8 kernel": 2 * nbytes / row["uint8 kernel s"] / 1e9,
                   "float32 kernel": 5 * nbytes / row["float32 kernel s"] / 1e9,
                   "transpose_bytes": 2 * nbytes / row["transpose_bytes s"] / 1e9}
    same = logreg_int8.levels(pixels, scale=1 / 255)
    ref = logreg_int8.levels(floats)
    row["same levels"] = bool(cupy.array_equal(same.v, ref.v)
                              and cupy.array_equal(same.vt, ref.vt) and same.step == ref.step)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1000000,4000000")
    parser.add_argument("--d", type=int, default=784)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    out = []
    for n in [int(r) for r in args.rows.split(",")]:
        out.append(measure(n, args.d))
        print(json.dumps(out[-1]), flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                       "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
