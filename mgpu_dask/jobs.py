"""End-to-end jobs behind the CLI: load, start, transfer, fit, predict, cold and warm.

A job returns a plain dictionary (what ``--json`` writes) so the benchmark
sweeps and the CLI share one code path.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
from distributed import futures_of, wait

from . import __version__, config
from ._compat import visible_gpus
from .cluster import connect
from .data import load_dataset, shard, shard_locations, split
from .knn import KNeighborsClassifier, accuracy, to_host
from .timing import Phases


def machine() -> dict[str, Any]:
    gpus = visible_gpus()
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "mgpu_dask": __version__,
            "gpus": [f"{g.name} ({g.memory_bytes / 2**30:.0f} GiB)" for g in gpus]}


def _predict_phases(clf: KNeighborsClassifier, queries: Any, timeout: float,
                    phases: Phases) -> np.ndarray:
    with phases("distances+top-k"):
        cand = clf.kneighbors_candidates(queries).persist()
        wait(futures_of(cand), timeout=timeout)
    with phases("vote"):
        pred = to_host(clf.predict_from_candidates(cand).compute())
    del cand
    return pred


def knn_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
            fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, n_neighbors: int = 3,
            weights: str = "distance", plan: str = "auto", method: str = "gemm",
            memory_budget: str | None = None, workers: int | None = None, device: str = "auto",
            scheduler_address: str | None = None, dashboard_address: str | None = None,
            timeout: float | None = None, repeats: int = 5,
            echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run KNN end to end and return every number the CLI prints."""
    say = echo or (lambda message: None)
    wait_timeout = timeout or config.seconds("cluster.compute-timeout")
    result: dict[str, Any] = {"task": "knn", "command": " ".join(sys.argv),
                              "machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    cold = Phases(say)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        say("[1/4] data")
        with cold("load"):
            ds = load_dataset(dataset, data_dir=data_dir, download=download, seed=seed)
            parts = split(ds.X, ds.y, test_size=test_size, seed=seed, fraction=fraction)
        if ds.note:
            say(f"note: {ds.note}")
        say("[2/4] cluster")
        with cold("cluster start"):
            rc = stack.enter_context(connect(workers, scheduler_address=scheduler_address,
                                             device=device, dashboard_address=dashboard_address,
                                             timeout=timeout))
        client = rc.client
        stack.enter_context(client.as_current())  # the estimator uses the active client
        say(f"  dashboard: {rc.dashboard_link}")
        say("[3/4] transfer (queries sharded, training set placed by plan)")
        clf = KNeighborsClassifier(n_neighbors, weights=weights, plan=plan, method=method,
                                   memory_budget=memory_budget)
        with cold("transfer"):
            queries = shard(parts.X_test, client, dtype=np.float32, timeout=wait_timeout)
            clf.fit(parts.X_train, parts.y_train)
        say("[4/4] predict: cold, then warm")
        pred = _predict_phases(clf, queries, wait_timeout, cold)
        cold_total = time.perf_counter() - t0
        warm_runs = []
        for _ in range(max(1, repeats)):
            warm = Phases()
            _predict_phases(clf, queries, wait_timeout, warm)
            warm_runs.append(warm.seconds)
        fused = []
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            to_host(clf.predict(queries, on_host=True))
            fused.append(time.perf_counter() - started)
        result.update({
            "dataset": ds.name, "data_source": ds.source, "note": ds.note,
            "n_train": int(len(parts.X_train)), "n_test": int(len(parts.X_test)),
            "n_features": int(parts.X_train.shape[1]), "fraction": fraction, "seed": seed,
            "n_neighbors": n_neighbors, "weights": weights, "method": method,
            "plan": clf.plan_, "cluster": rc.plan.kind.value,
            "workers": len(client.scheduler_info(n_workers=-1)["workers"]),
            "device": clf.layout_.device, "dashboard": rc.dashboard_link,
            "shards": [s._asdict() for s in shard_locations(queries, client)],
            "train_copies_on": clf.layout_.workers,
            "accuracy": accuracy(pred, parts.y_test),
            "cold": {**cold.seconds, "total": cold_total},
            "warm": {name: statistics.median(r[name] for r in warm_runs) for name in warm_runs[0]},
            "warm_predict_seconds": fused,
            "warm_predict_median": statistics.median(fused),
        })
    return result


def logreg_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
               fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, C: float = 1.0,
               max_iter: int = 100, tol: float = 1e-4, workers: int | None = None,
               device: str = "auto", scheduler_address: str | None = None,
               dashboard_address: str | None = None, timeout: float | None = None,
               repeats: int = 3, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Logistic regression end to end (pixels scaled to [0, 1]); every number the CLI prints."""
    from .logreg import LogisticRegression

    say = echo or (lambda message: None)
    wait_timeout = timeout or config.seconds("cluster.compute-timeout")
    result: dict[str, Any] = {"task": "logreg", "command": " ".join(sys.argv),
                              "machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    cold = Phases(say)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        say("[1/4] data")
        with cold("load"):
            ds = load_dataset(dataset, data_dir=data_dir, download=download, seed=seed)
            parts = split(ds.X, ds.y, test_size=test_size, seed=seed, fraction=fraction)
        if ds.note:
            say(f"note: {ds.note}")
        scale = 1.0 / max(1.0, float(ds.X.max()))  # pixels to [0, 1]
        say("[2/4] cluster")
        with cold("cluster start"):
            rc = stack.enter_context(connect(workers, scheduler_address=scheduler_address,
                                             device=device, dashboard_address=dashboard_address,
                                             timeout=timeout))
        client = rc.client
        stack.enter_context(client.as_current())
        say(f"  dashboard: {rc.dashboard_link}")
        say("[3/4] transfer (train and test sharded, one shard per worker)")
        with cold("transfer"):
            X_train = shard(parts.X_train, client, dtype=np.float32, scale=scale, timeout=wait_timeout)
            X_test = shard(parts.X_test, client, dtype=np.float32, scale=scale, timeout=wait_timeout)
        say("[4/4] fit and predict: cold, then warm")
        runs = []
        for i in range(1 + max(1, repeats)):
            phases = cold if i == 0 else Phases()
            clf = LogisticRegression(C=C, max_iter=max_iter, tol=tol)
            with phases("fit"):
                clf.fit(X_train, parts.y_train)
            with phases("predict"):
                pred = to_host(clf.predict(X_test))
            if i == 0:
                cold_total = time.perf_counter() - t0
            else:
                runs.append(phases.seconds)
        result.update({
            "dataset": ds.name, "data_source": ds.source, "note": ds.note,
            "n_train": int(len(parts.X_train)), "n_test": int(len(parts.X_test)),
            "n_features": int(parts.X_train.shape[1]), "fraction": fraction, "seed": seed,
            "C": C, "max_iter": max_iter, "tol": tol, "cluster": rc.plan.kind.value,
            "workers": len(client.scheduler_info(n_workers=-1)["workers"]),
            "device": "gpu" if type(X_train._meta).__module__.startswith("cupy") else "cpu",
            "dashboard": rc.dashboard_link,
            "shards": [s._asdict() for s in shard_locations(X_train, client)],
            "accuracy": accuracy(pred, parts.y_test), "n_iter": clf.n_iter_,
            "round_trips": clf.n_round_trips_, "loss": clf.loss_, "converged": clf.converged_,
            "cold": {**cold.seconds, "total": cold_total},
            "warm": {name: statistics.median(r[name] for r in runs) for name in runs[0]},
            "warm_fit_predict_seconds": [r["fit"] + r["predict"] for r in runs],
        })
        result["warm_fit_predict_median"] = statistics.median(result["warm_fit_predict_seconds"])
    return result
