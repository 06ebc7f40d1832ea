"""Labels sent with every fit against labels that live beside their rows, in one cluster
(device machine): logistic-regression fits on MNIST (or FRACTION of it) alternating the
two, each followed by a predict, with the medians of fit, predict and the fit's profile.

Usage: python benchmarks/labels_probe.py [--workers W] [--fraction F] [--repeats N]
       [--data-dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.inputs import to_host
from mgpu_dask.logreg import LogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ds = load_dataset("mnist", data_dir=args.data_dir)
    s = split(ds.X, ds.y, fraction=args.fraction)
    out: dict = {"command": "python benchmarks/labels_probe.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)}
    with connect(workers=args.workers, dashboard_address=":0") as rc, rc.client.as_current():
        client = rc.client
        X = shard(s.X_train, client)
        queries = shard(s.X_test, client)
        ways = {"labels from the client": s.y_train,
                "labels beside the rows": shard(s.y_train, client, like=X)}
        times: dict = {name: {"fit": [], "predict": [], "profile": []} for name in ways}
        for i in range(args.repeats + 1):
            for name, y in ways.items():
                started = time.perf_counter()
                model = LogisticRegression(input_scale=1 / 255).fit(X, y)
                fitted = time.perf_counter()
                pred = to_host(model.predict(queries, on_host=True))
                done = time.perf_counter()
                if i:  # the first of each is not counted
                    times[name]["fit"].append(fitted - started)
                    times[name]["predict"].append(done - fitted)
                    times[name]["profile"].append(model.fit_profile_)
                accuracy = float((pred == s.y_test).mean())
        for name, t in times.items():
            keys = [k for k, v in t["profile"][0].items() if isinstance(v, float)]
            out[name] = {"fit ms": round(statistics.median(t["fit"]) * 1e3, 3),
                         "predict ms": round(statistics.median(t["predict"]) * 1e3, 3),
                         "profile ms": {k: round(statistics.median(p[k] for p in t["profile"])
                                                 * 1e3, 3) for k in keys},
                         "accuracy": accuracy}
            print(name, out[name], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
