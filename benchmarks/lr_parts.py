"""Where a warm logistic-regression fit and predict spend their time, on the client and
on the workers.

    python benchmarks/lr_parts.py OUT.json [--workers N | --scheduler-address ADDR]
        [--fraction 1] [--repeats 20]

MNIST as the ``logreg`` job places it (uint8 rows, ``input_scale``), then ``repeats``
warm rounds of ``fit`` and ``predict(on_host=True)`` + ``to_host``, each timed (and a
second predict of the same model, ``predict again``, timed apart from the round), and
the predict's parts on the client: ``_check_X`` (the rows' dask expression), the
holders' lookup, the lane's sends and each answer's wait.  Then, for the same test
blocks: the floor of a straight call (``direct.run_held`` of ``numpy.ndim``, every
holder at once: a function pickled by reference, as ``predict_block`` is; one defined
in this script would go by value, which costs more than the call) and, on each
worker, ``predict_block`` alone (timed there, the GPU synchronised).  Writes medians (ms) and the fit's profile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def _ms(xs: list[float]) -> float | None:
    return round(1e3 * statistics.median(xs), 3) if xs else None


def _predict_alone(key: object, coef: np.ndarray, intercept: np.ndarray, labels: np.ndarray,
                   repeats: int, dask_worker: object = None) -> list[float]:
    """On a worker: ``predict_block`` on its block ``key``, timed with the GPU synchronised."""
    from mgpu_dask.logreg.blocks import predict_block

    block = dask_worker.data[key]
    try:
        import cupy

        sync = cupy.cuda.get_current_stream().synchronize
    except ImportError:
        def sync() -> None:
            return None
    out = []
    for _ in range(repeats + 3):
        sync()
        t = time.perf_counter()
        predict_block(block, coef, intercept, labels, True)
        sync()
        out.append(time.perf_counter() - t)
    return out[3:]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--scheduler-address")
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, shard, split
    from mgpu_dask.data.sharding import pixel_rows
    from mgpu_dask.jobs.machine import machine
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.logreg import estimator as est
    from mgpu_dask.parallel import direct, lane, placement
    from mgpu_dask.parallel.inputs import to_host

    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, seed=0)
    X_train, y_train = s.X_train, s.y_train
    if args.fraction != 1.0:
        reps = int(round(args.fraction))
        X_train, y_train = np.tile(X_train, (reps, 1)), np.tile(y_train, reps)
    stamps: dict[str, list[float]] = {}

    def timed(owner: object, name: str, label: str) -> None:
        real = getattr(owner, name)

        def wrapper(*a: object, **k: object) -> object:
            t = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                stamps.setdefault(label, []).append(time.perf_counter() - t)
        setattr(owner, name, wrapper)

    with connect(None if args.scheduler_address else args.workers,
                 scheduler_address=args.scheduler_address, dashboard_address=":0") as running:
        client = running.client
        Xtr, Xte, scale = pixel_rows(X_train, s.X_test, client, 1 / 255.0, keep_bytes=True,
                                     timeout=120)
        ytr = shard(y_train, client, like=Xtr, timeout=120)
        for _ in range(3):
            clf = LogisticRegression(input_scale=scale).fit(Xtr, ytr)
            to_host(clf.predict(Xte, on_host=True))
        timed(est.LogisticRegression, "_check_X", "check_X")
        timed(placement, "locate", "locate")
        timed(lane, "_send", "lane send")
        timed(lane, "_message", "lane answer")
        fits, predicts, totals, profiles, again = [], [], [], [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            clf = LogisticRegression(input_scale=scale).fit(Xtr, ytr)
            t1 = time.perf_counter()
            pred = to_host(clf.predict(Xte, on_host=True))
            t2 = time.perf_counter()
            fits.append(t1 - t)
            predicts.append(t2 - t1)
            totals.append(t2 - t)
            profiles.append(clf.fit_profile_)
            t = time.perf_counter()
            to_host(clf.predict(Xte, on_host=True))
            again.append(time.perf_counter() - t)
        futures, where = placement.locate(client, Xte)
        labels = clf.classes_
        coef, intercept = clf._coef_of_rows(), clf.intercept_
        floor = []
        for _ in range(args.repeats + 3):
            t = time.perf_counter()
            direct.run_held(client, {w: [(np.ndim, (direct.Held(f.key),))]
                                     for f, w in zip(futures, where)}, 60)
            floor.append(time.perf_counter() - t)
        alone = {w: _ms(client.run(_predict_alone, f.key, coef, intercept, labels,
                                   args.repeats, workers=[w])[w])
                 for f, w in zip(futures, where)}
    numeric = {k: _ms([p[k] for p in profiles if isinstance(p.get(k), float)])
               for k in profiles[0] if isinstance(profiles[0].get(k), float)}
    out = {
        "machine": machine(), "command": "python " + " ".join(["benchmarks/lr_parts.py", *argv]),
        "workers": len(where), "fraction": args.fraction, "n_train": int(len(X_train)),
        "accuracy": float((pred == s.y_test).mean()),
        "warm_ms": {"fit": _ms(fits), "predict": _ms(predicts), "fit+predict": _ms(totals),
                    "predict again": _ms(again)},
        "predict_parts_ms": {k: _ms(v) for k, v in stamps.items()},
        "predict_parts_calls": {k: len(v) for k, v in stamps.items()},
        "straight_call_floor_ms": _ms(floor[3:]),
        "predict_block_alone_ms": alone,
        "fit_profile_median_s": numeric,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("warm_ms", "predict_parts_ms",
                                          "straight_call_floor_ms", "predict_block_alone_ms")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
