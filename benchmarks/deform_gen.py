"""Time making the deformed MNIST training set on 1 and all GPUs, and check it.

For each GPU count: a LocalCUDACluster, ``deformed_train`` twice (the first
loads the kernel), the second timed from submit to every block resident;
then rows sampled across the set are compared with the CPU twin (bit-identical).

    python benchmarks/deform_gen.py --copies 155 [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mgpu_dask._compat import gpu_count
from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, split
from mgpu_dask.data.deformed import DeformedSpec, deformed_train
from mgpu_dask.inputs import as_numpy
from mgpu_dask.kernels.deform import deform_rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--copies", type=int, default=155)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    parts = split(ds.X, ds.y, seed=0)
    spec = DeformedSpec(args.copies, 0)
    for workers in sorted({1, gpu_count()}):
        with connect(workers, dashboard_address=":0") as rc:
            deformed_train(parts.X_train, parts.y_train, rc.client, spec)  # kernel loaded
            started = time.perf_counter()
            X, _ = deformed_train(parts.X_train, parts.y_train, rc.client, spec)
            seconds = time.perf_counter() - started
            n = X.shape[0]
            picks = np.unique(np.linspace(0, n - 1, 2000).astype(int))
            rows = as_numpy(X[picks].compute())
            want = np.concatenate([deform_rows(parts.X_train, int(r), 1, 0) for r in picks])
            print(f"{workers} GPU(s): {n:,} rows ({X.nbytes / 1e9:.2f} GB uint8) in "
                  f"{seconds:.3f} s; {len(picks)} sampled rows equal to the CPU twin: "
                  f"{bool((rows == want).all())}", flush=True)
            del X


if __name__ == "__main__":
    main()
