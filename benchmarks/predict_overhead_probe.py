"""How much of a warm predict is the workers' computing and how much is everything else
(device machine): the CLI's warm KNN and logistic-regression predicts on MNIST, each
timed on the client and, through Dask's task stream, on the workers (the ``compute``
span of every task).  The rest -- submission, scheduling, the result's way home -- is
what a second GPU cannot shorten; Dask's own round trips with nothing computed are
measured first for comparison.

Usage: python benchmarks/predict_overhead_probe.py [--workers W] [--fraction F]
       [--repeats N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from distributed import get_task_stream
from roundtrip_probe import median_ms  # this folder: the scripts run as files

from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.inputs import to_host
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.logreg import LogisticRegression


def timed_predicts(client, predict, repeats: int) -> dict:
    """``predict()`` ``repeats`` times (after one uncounted): client wall time, and per
    predict the span from its first task's start to its last task's end on the workers
    and the longest single task."""
    predict()
    walls, spans, longest = [], [], []
    for _ in range(repeats):
        with get_task_stream(client) as stream:
            started = time.perf_counter()
            predict()
            walls.append(time.perf_counter() - started)
        computes = [s for t in stream.data for s in t["startstops"] if s["action"] == "compute"]
        if computes:
            spans.append(max(s["stop"] for s in computes) - min(s["start"] for s in computes))
            longest.append(max(s["stop"] - s["start"] for s in computes))
    median = (lambda xs: round(statistics.median(xs) * 1e3, 3) if xs else None)
    wall, span = median(walls), median(spans)
    return {"wall ms": wall, "workers' span ms": span, "longest task ms": median(longest),
            "tasks": len(stream.data),
            "outside the workers ms": None if span is None else round(wall - span, 3)}


def _nothing() -> int:
    return 0


def floors(client, repeats: int) -> dict:
    """Dask's own round trips on this cluster, nothing computed: a task that returns 0
    (submit, result), one per worker gathered together, a call to the scheduler, a
    function run on one worker (``Client.run``: through the scheduler, no task)."""
    workers = sorted(client.scheduler_info()["workers"])

    def ms(fn) -> float:
        return round(median_ms(fn, repeats), 3)

    return {
        "submit to one worker ms": ms(
            lambda: client.submit(_nothing, workers=workers[:1], pure=False).result()),
        "submit to every worker ms": ms(lambda: client.gather(
            [client.submit(_nothing, workers=[w], pure=False) for w in workers])),
        "scheduler call ms": ms(lambda: client.run_on_scheduler(_nothing)),
        "worker run ms": ms(lambda: client.run(_nothing, workers=workers[:1])),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y, fraction=args.fraction)
    out = {"command": "python benchmarks/predict_overhead_probe.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)}
    with connect(workers=args.workers, dashboard_address=":0") as rc, rc.client.as_current():
        client = rc.client
        out["floors"] = floors(client, args.repeats)
        print("floors", out["floors"], flush=True)
        queries = shard(s.X_test, client)
        knn = KNeighborsClassifier(3, weights="distance").fit(s.X_train, s.y_train)
        out["knn"] = timed_predicts(
            client, lambda: to_host(knn.predict(queries, on_host=True)), args.repeats)
        print("knn", out["knn"], flush=True)
        X = shard(s.X_train, client)
        model = LogisticRegression(input_scale=1 / 255, max_iter=20).fit(X, s.y_train)
        out["logreg predict"] = timed_predicts(
            client, lambda: to_host(model.predict(queries, on_host=True)), args.repeats)
        print("logreg predict", out["logreg predict"], flush=True)
        out["logreg fit"] = timed_predicts(
            client, lambda: LogisticRegression(input_scale=1 / 255).fit(X, s.y_train),
            max(3, args.repeats // 4))
        print("logreg fit", out["logreg fit"], flush=True)
        out["workers"] = len(client.scheduler_info()["workers"])
        out["accuracy"] = float((to_host(knn.predict(queries, on_host=True))
                                 == np.asarray(s.y_test)).mean())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
