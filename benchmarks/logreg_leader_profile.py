"""cProfile of the L-BFGS loop inside the worker that runs a single-host fit.

Starts a cluster, fits once (warm-up), then wraps the loop in cProfile on
every worker and fits again; prints the leader's top functions by own time.

    python benchmarks/logreg_leader_profile.py --workers 4 [--fraction 1] [--top 25]
"""

from __future__ import annotations

import argparse

import numpy as np


def _install(top: int) -> None:
    import cProfile
    import io
    import pstats

    import mgpu_dask.logreg_fit as LR

    plain = getattr(LR, "_plain_lbfgs", LR.lbfgs_on_host)
    LR._plain_lbfgs = plain

    def profiled(evaluate, problem):
        prof = cProfile.Profile()
        result = prof.runcall(plain, evaluate, problem)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
        LR._profile_text = text.getvalue()
        return result

    LR.lbfgs_on_host = profiled


def _report() -> str | None:
    import mgpu_dask.logreg_fit as LR

    return getattr(LR, "_profile_text", None)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, shard, split
    from mgpu_dask.logreg import LogisticRegression

    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, fraction=args.fraction)
    with connect(args.workers, dashboard_address=":0") as rc, rc.client.as_current():
        c = rc.client
        X = shard(s.X_train, c, dtype=np.float32, scale=1 / 255)
        LogisticRegression().fit(X, s.y_train)
        c.run(_install, args.top)
        model = LogisticRegression().fit(X, s.y_train)
        print(f"fit: {model.comm_}, {model.n_evaluations_} evaluations, profile "
              f"{ {k: round(v, 4) for k, v in model.fit_profile_.items()} }")
        for worker, text in c.run(_report).items():
            if text:
                print(worker)
                print(text)


if __name__ == "__main__":
    main()
