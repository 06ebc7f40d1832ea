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
(they must be equal); then ``repeats`` shared-memory fits back to back, nothing
between them.  Writes medians and every timing, the machine, the command
and the commit.

``--parts``: then ``repeats`` more shared-memory fits under Dask's task stream, each
split on one clock into the client's write of the file, submission to the first
task's start, the tasks (each worker reads the file and prepares its copy), and the
last task's end to ``fit``'s return; and, on the first worker alone, the read of
the file into its GPU (``shared_rows.read``) timed ``repeats`` times.
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


def _read_alone(shared: object, repeats: int) -> list[float]:
    """On a worker: ``shared_rows.read`` of the whole file to its device, timed."""
    from mgpu_dask.config.environment import has_gpu
    from mgpu_dask.parallel import shared_rows

    device = "gpu" if has_gpu() else "cpu"
    out = []
    for _ in range(repeats + 2):
        t = time.perf_counter()
        shared_rows.read(shared, device=device)  # synchronises its stream before returning
        out.append(time.perf_counter() - t)
    return out[2:]


def _parts(client: object, X: np.ndarray, y: np.ndarray, repeats: int) -> dict:
    from distributed import get_task_stream

    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.parallel import shared_rows

    writes: list[float] = []
    real = shared_rows.share

    def share(*a: object, **k: object) -> object:
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            writes.append(time.perf_counter() - t)

    rows = {"write": [], "to first task": [], "tasks": [], "after last task": [], "fit": []}
    shared_rows.share = share
    try:
        for _ in range(repeats):
            with get_task_stream(client) as ts:
                begun = time.time()
                KNeighborsClassifier(3).fit(X, y)
                ended = time.time()
            spans = [(ss["start"], ss["stop"]) for d in ts.data for ss in d["startstops"]
                     if ss["action"] == "compute"]
            first, last = min(a for a, _ in spans), max(b for _, b in spans)
            rows["write"].append(writes[-1])
            rows["to first task"].append(first - begun - writes[-1])
            rows["tasks"].append(last - first)
            rows["after last task"].append(ended - last)
            rows["fit"].append(ended - begun)
        shared = real(np.ascontiguousarray(X), client, list(client.scheduler_info()["workers"]))
        worker = sorted(client.scheduler_info()["workers"])[0]
        rows["read alone (first worker)"] = client.run(_read_alone, shared, repeats,
                                                       workers=[worker])[worker]
    finally:
        shared_rows.share = real
    return {k: round(1000 * statistics.median(v), 3) for k, v in rows.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--scheduler-address")
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--commit", default="")
    parser.add_argument("--made-by", default="")
    parser.add_argument("--parts", action="store_true")
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
        in_a_row = []  # then shared-memory fits back to back, as a user refitting has them
        for _ in range(args.repeats):
            started = time.perf_counter()
            clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
            in_a_row.append(time.perf_counter() - started)
            del clf
        workers = len(client.scheduler_info()["workers"])
        parts = _parts(client, s.X_train, s.y_train, args.repeats) if args.parts else None
    equal = bool(np.array_equal(predictions["shared memory"], predictions["in the graph"]))
    out = {
        "machine": machine(), "commit": args.commit, "made_by": args.made_by,
        "command": "python " + " ".join(["benchmarks/host_fit.py", *argv]),
        "dataset": args.dataset, "n_train": int(len(s.X_train)),
        "train_bytes": int(s.X_train.nbytes), "workers": workers,
        "warm_fit_median_ms": {w: round(1000 * statistics.median(v), 2) for w, v in fits.items()},
        "warm_shard_median_ms": {w: round(1000 * statistics.median(v), 2)
                                 for w, v in shards.items()},
        "warm_fit_back_to_back_median_ms": round(1000 * statistics.median(in_a_row), 2),
        "warm_fit_seconds": fits, "warm_shard_seconds": shards,
        "warm_fit_back_to_back_seconds": in_a_row,
        "predictions_equal": equal,
        "accuracy": float((predictions["shared memory"] == s.y_test).mean()),
    }
    if parts is not None:
        out["parts_median_ms"] = parts
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("warm_fit_median_ms", "warm_fit_back_to_back_median_ms",
                                          "warm_shard_median_ms",
                                          "predictions_equal", "accuracy", "workers")}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
