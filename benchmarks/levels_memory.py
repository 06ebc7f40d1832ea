"""The int8 levels of 8-bit rows (``kernels.logreg.int8.levels``): the GPU memory they hold
and the time they take, three calls in one process (the first compiles).

usage: python benchmarks/levels_memory.py [ROWS]   (8,137,500: deformed MNIST's, 784 features)

Run with the package to measure first on ``PYTHONPATH`` (``device.sh`` does not; the
results name the commands).  One line per call.
"""

from __future__ import annotations

import sys
import time


def main(rows: int) -> None:
    import cupy

    from mgpu_dask.kernels.logreg import int8

    pool = cupy.get_default_memory_pool()
    X = cupy.random.randint(0, 256, (rows, 784), dtype=cupy.int32).astype(cupy.uint8)
    pool.free_all_blocks()
    cupy.cuda.Device().synchronize()
    for _ in range(3):
        before = pool.used_bytes()
        started = time.perf_counter()
        made = int8.levels(X, scale=1 / 255)
        cupy.cuda.Device().synchronize()
        took = time.perf_counter() - started
        held = pool.used_bytes() - before
        print(f"{int8.__file__}: n={rows} levels {1e3 * took:.1f} ms, holds "
              f"{held / 2**30:.2f} GiB (vt {'made' if made.vt is not None else 'not made'})",
              flush=True)
        del made


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8137500)
