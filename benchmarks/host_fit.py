"""Warm KNN fits from host NumPy, the training rows through shared memory or in the graph.

    python benchmarks/host_fit.py OUT.json [--workers N | --scheduler-address ADDR]
        [--dataset mnist] [--repeats 10] [--commit SHA] [--made-by TEXT]

On the cluster ``mgpu_dask.cluster.connect`` starts (or joins): the data set's
split as the CLI makes it (seed 0), then ``repeats`` rounds of, alternating,
``KNeighborsClassifier(3).fit(X_train, y_train)`` with the rows handed over
through a shared-memory file (``mgpu_dask.parallel.shared_rows``) and with them
carried in the graph (the file path turned off); each fit is timed to the
placed copies (``fit`` waits for them), after one cold fit of each.  Also:
``shard`` of the training rows both ways, and the predictions of the two fits
(they must be equal).  Writes medians and every timing, the machine, the command
and the commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager

import numpy as np


@contextmanager
def _in_graph(on: bool):
    from mgpu_dask.parallel import shared_rows

    kept = shared_rows.MIN_BYTES
    if on:
        shared_rows.MIN_BYTES = 1 << 62
    try:
        yield
    finally:
        shared_rows.MIN_BYTES = kept


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--scheduler-address")
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--commit", default="")
    parser.add_argument("--made-by", default="")
    args = parser.parse_args(argv)

    from distributed import futures_of, wait

    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, shard, split
    from mgpu_dask.jobs.machine import machine
    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.parallel.inputs import to_host

    ds = load_dataset(args.dataset)
    s = split(ds.X, ds.y, seed=0)
    ways = {"shared memory": False, "in the graph": True}
    fits: dict[str, list[float]] = {w: [] for w in ways}
    shards: dict[str, list[float]] = {w: [] for w in ways}
    with connect(None if args.scheduler_address else args.workers,
                 scheduler_address=args.scheduler_address, dashboard_address=":0") as running:
        client = running.client
        queries = shard(s.X_test, client)
        predictions = {}
        for way, graph in ways.items():  # cold fits (and the predictions of each way)
            with _in_graph(graph):
                clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
            predictions[way] = to_host(clf.predict(queries))
            del clf
        for r in range(args.repeats):
            for way, graph in (ways.items() if r % 2 == 0 else reversed(ways.items())):
                with _in_graph(graph):
                    started = time.perf_counter()
                    clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
                    fits[way].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    Xd = shard(s.X_train, client)
                    wait(futures_of(Xd))
                    shards[way].append(time.perf_counter() - started)
                del clf, Xd
        workers = len(client.scheduler_info()["workers"])
    equal = bool(np.array_equal(predictions["shared memory"], predictions["in the graph"]))
    out = {
        "machine": machine(), "commit": args.commit, "made_by": args.made_by,
        "command": "python " + " ".join(["benchmarks/host_fit.py", *argv]),
        "dataset": args.dataset, "n_train": int(len(s.X_train)),
        "train_bytes": int(s.X_train.nbytes), "workers": workers,
        "warm_fit_median_ms": {w: round(1000 * statistics.median(v), 2) for w, v in fits.items()},
        "warm_shard_median_ms": {w: round(1000 * statistics.median(v), 2)
                                 for w, v in shards.items()},
        "warm_fit_seconds": fits, "warm_shard_seconds": shards,
        "predictions_equal": equal,
        "accuracy": float((predictions["shared memory"] == s.y_test).mean()),
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("warm_fit_median_ms", "warm_shard_median_ms",
                                          "predictions_equal", "accuracy", "workers")}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
