"""Kill a GPU worker mid-run (4 workers, MNIST) and check the results are unchanged.

    python benchmarks/worker_kill.py --data-dir DIR [--workers 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import time

import numpy as np

from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.knn import KNeighborsClassifier, to_host
from mgpu_dask.logreg import LogisticRegression
from mgpu_dask.testing import loss_grad_that_kills


def kill_one(client) -> str:
    pids = client.run(os.getpid)
    victim = sorted(pids)[1]
    os.kill(pids[victim], signal.SIGKILL)
    return victim


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y)
    out = {"workers": args.workers}
    with connect(args.workers, dashboard_address=":0", timeout=300) as rc:
        c = rc.client
        with c.as_current():
            Q = shard(s.X_test, c, dtype=np.float32)
            clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
            before = to_host(clf.predict(Q))
            out["knn_killed"] = kill_one(c)
            t = time.perf_counter()
            after = to_host(clf.predict(Q), timeout=300)
            out["knn_predict_after_kill_s"] = time.perf_counter() - t
            out["knn_identical"] = bool(np.array_equal(before, after))
            out["knn_accuracy"] = float((after == s.y_test).mean())
            c.wait_for_workers(args.workers, timeout=120)
            X = shard(s.X_train, c, dtype=np.float32, scale=1 / 255)
            ref = LogisticRegression(max_iter=100, comm="actors").fit(X, s.y_train)
            out["logreg_loss_reference"] = ref.loss_
            for comm, victim in (("actors", "other"), ("single-host", "other"),
                                 ("single-host", "self")):
                c.wait_for_workers(args.workers, timeout=120)
                marker = f"/tmp/worker-kill-{comm}-{victim}-{time.time_ns()}"
                hook = functools.partial(loss_grad_that_kills, victim=victim, marker=marker,
                                         pids=sorted(c.run(os.getpid).values()), after=20)
                t = time.perf_counter()
                lr = LogisticRegression(max_iter=100, comm=comm, loss_grad=hook).fit(X, s.y_train)
                out[f"logreg_{comm}_{victim}"] = {
                    "killed": os.path.exists(marker), "fit_s": time.perf_counter() - t,
                    "ran_as": lr.comm_, "note": lr.comm_note_, "recoveries": lr.n_recoveries_,
                    "loss": lr.loss_, "rel_diff": abs(lr.loss_ - ref.loss_) / ref.loss_,
                    "accuracy": lr.score(shard(s.X_test, c, dtype=np.float32, scale=1 / 255),
                                         s.y_test)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
