"""Where a data-parallel L-BFGS evaluation spends its time, per worker count.

Times (median of 100) on a LocalCUDACluster: an Actor call that does nothing,
an Actor call that returns a 785x10 gradient-sized array, our shard loss_grad
through the Actor, and loss_grad alone inside the worker.

    python benchmarks/roundtrip_probe.py --workers 4 --data-dir DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.placement import locate


class Probe:
    def __init__(self, X, y):
        self.X, self.y = X, y

    def noop(self, coef, intercept):
        return 0.0

    def echo(self, coef, intercept):
        return 0.0, coef, intercept

    def loss_grad(self, coef, intercept):
        from mgpu_dask.kernels.logreg import loss_grad
        return loss_grad(self.X, self.y, coef, intercept)

    def local_timing(self, coef, intercept, n=50):
        from mgpu_dask.kernels.logreg import loss_grad
        loss_grad(self.X, self.y, coef, intercept)
        t = time.perf_counter()
        for _ in range(n):
            loss_grad(self.X, self.y, coef, intercept)
        return (time.perf_counter() - t) / n


def median_ms(fn, n=100):
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--data-dir")
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y)
    W, b = np.zeros((784, 10)), np.zeros(10)
    with connect(args.workers, dashboard_address=":0") as rc:
        c = rc.client
        X = shard(s.X_train, c, dtype=np.float32, scale=1 / 255)
        y = shard(s.y_train, c, dtype=np.int32, like=X)
        xs, ys = (list(zip(*locate(c, a))) for a in (X, y))
        actors = [c.submit(Probe, xf, yf, workers=[w], actor=True).result()
                  for (xf, w), (yf, _) in zip(xs, ys)]

        def call(name):
            return lambda: [f.result() for f in [getattr(a, name)(W, b) for a in actors]]

        out = {"workers": args.workers,
               "actor_noop_ms": median_ms(call("noop")),
               "actor_echo_gradient_ms": median_ms(call("echo")),
               "actor_loss_grad_ms": median_ms(call("loss_grad")),
               "submit_noop_ms": median_ms(lambda: c.gather([c.submit(lambda i: i, i, pure=False)
                                                             for i in range(args.workers)])),
               "in_worker_loss_grad_ms": 1000 * max(a.local_timing(W, b).result() for a in actors)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
