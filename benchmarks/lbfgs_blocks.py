"""The device L-BFGS of logistic regression without Dask at several block sizes of the
int8 gradient product (``kernels.logreg.int8``'s ``v^T R``), on one GPU and on two.

usage (GPU machine): python benchmarks/lbfgs_blocks.py OUT.json COPIES ROWS

For each of the comma-separated ``COPIES`` (MNIST's training rows repeated, as
``--fraction``) and each of the comma-separated block sizes ``ROWS``, two rounds:
one :class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend` with every row on GPU 0,
and (two GPUs) one with the rows halved between GPU 0 and GPU 1, each the median
of 12 fits of 100 iterations after three warm-ups (ms), the loss and the first 16
hex digits of the point's SHA-256 (the same for every block size: the products are
exact).  The block size is set for every shard alike, whatever its rows.
"""
import json
import sys

from lbfgs_fits import fit_times, mnist_rows


def _cell(fit: dict) -> list:
    """``[median ms, loss, point hash]``, as the committed results hold them."""
    return [fit["median_ms"], fit["fun"], fit["point"]]


def main():
    import cupy

    from mgpu_dask.kernels.logreg import int8
    out = sys.argv[1]
    sizes = [int(a) for a in sys.argv[2].split(",")]
    rows = [int(a) for a in sys.argv[3].split(",")]
    gpus = cupy.cuda.runtime.getDeviceCount()
    res = []
    for times in sizes:
        Xtr, ytr = mnist_rows(times)
        n = len(Xtr)
        h = n // 2
        with cupy.cuda.Device(0):
            one = [(cupy.asarray(Xtr), cupy.asarray(ytr))]
            s0 = (cupy.asarray(Xtr[:h]), cupy.asarray(ytr[:h]))
        two = None
        if gpus > 1:
            with cupy.cuda.Device(1):
                two = [s0, (cupy.asarray(Xtr[h:]), cupy.asarray(ytr[h:]))]
        for rnd in range(2):
            for g in rows:
                int8.GRADIENT_ROWS = int8.SMALL_GRADIENT_ROWS = g  # every shard alike
                r = {"copies": times, "gradient_rows": g, "round": rnd,
                     "one_gpu": _cell(fit_times(one, n))}
                if two:
                    r["two_gpus"] = _cell(fit_times(two, n))
                print(json.dumps(r), flush=True)
                res.append(r)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
