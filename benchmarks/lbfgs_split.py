"""The device L-BFGS of logistic regression without Dask, its rows split between GPU 0 (the
leader, which holds the optimiser's state) and GPU 1 at several leader shares.

usage (a machine with two GPUs): python benchmarks/lbfgs_split.py OUT.json COPIES SHARES [REPEATS]

MNIST's training rows (``COPIES`` times over), uint8 with the scale 1/255 as the
``logreg`` job fits them.  For each of the comma-separated ``SHARES`` (a fraction of
the rows evaluated on GPU 0, 1 for GPU 0 alone, or above 1 a row count) one
:class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend`, three warm-up fits and then
``REPEATS`` (12) fits of 100 iterations from the same backend (``reuse``), each timed
on the host.  Writes each share's median and minimum (ms) and the loss it reached:
what the L-BFGS costs on one GPU and on two with no Dask process in between.
"""
import json
import sys

import cupy
from lbfgs_fits import fit_times, mnist_rows


def main() -> None:
    out_path, times = sys.argv[1], int(sys.argv[2])
    shares = [float(a) for a in sys.argv[3].split(",")]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    Xtr, ytr = mnist_rows(times)
    n = len(Xtr)
    res = {"n": n, "gpus": cupy.cuda.runtime.getDeviceCount(), "runs": []}
    for share in shares:
        r0 = n if share >= 1 else int(round(share * n))
        if share > 1:
            r0 = int(share)
        parts = [(0, 0, r0)] + ([(1, r0, n)] if r0 < n else [])
        shards = []
        for dev_id, a, b in parts:
            with cupy.cuda.Device(dev_id):
                shards.append((cupy.asarray(Xtr[a:b]), cupy.asarray(ytr[a:b])))
        row = {"leader_rows": r0, "share": round(r0 / n, 4), **fit_times(shards, n, reps)}
        print(json.dumps(row), flush=True)
        res["runs"].append(row)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
