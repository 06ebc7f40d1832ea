"""The ``knn`` job: MNIST (or any data set) through our KNN, cold and warm, every phase
timed."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from distributed import futures_of, wait

from ..cluster import StartingCluster
from ..data import shard
from ..data.sharding import cast_to, rows_as_dtype
from ..knn import KNeighborsClassifier, blocks, plans
from ..parallel.inputs import accuracy, to_host
from . import transfers
from .phases import Phases
from .session import Echo, fingerprint, notes, placement, session, summary
from .warmup import JOB_MARGIN, begin, knn_spec


def predict_phases(clf: KNeighborsClassifier, queries: Any, client: Any, timeout: float,
                   phases: Phases) -> np.ndarray:
    """A fitted model's predict in two timed phases, the search and the vote, by the public
    graphs of :mod:`mgpu_dask.knn.plans` on its placed rows (``clf.layout_``)."""
    own = np.array_equal(clf.classes_, np.arange(len(clf.classes_)))
    with phases("distances+top-k"):
        cand = plans.candidates(queries, clf.layout_, clf.n_neighbors, margin=clf.margin,
                                tile_bytes=None, client=client, timeout=timeout)
        wait(futures_of(cand), timeout=timeout)
    with phases("vote"):
        pred = to_host(plans.vote_predictions(client, cand, len(clf.classes_), clf.weights,
                                              None if own else clf.classes_,
                                              clf.layout_.device), timeout)
    del cand
    return pred


def searched(client: Any, s: Any, clf: KNeighborsClassifier) -> dict[str, Any]:
    """Which searches the workers ran (``search``: the fused kernel's build or the tile
    loop), whether every worker's tile loop ran as one CUDA graph, the most query blocks
    one worker searched as one (``queries_joined``: workers sharing a GPU; 0: none), and
    the run's notes."""
    ran = client.run(blocks.what_ran)
    graphs = [r["graph"] for r in ran.values() if r["graph"] is not None]
    worker_notes = sorted({n for r in ran.values() for n in r["notes"]})
    return {"search": sorted({kind for r in ran.values() for kind in r.get("searches", ())}),
            "graph": all(graphs) if graphs else None,
            "queries_joined": max((r.get("joined", 0) for r in ran.values()), default=0),
            "notes": notes(s, clf.precision_note_, *worker_notes)}


def knn_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
            fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, n_neighbors: int = 3,
            weights: str = "distance", plan: str = "auto", method: str = "gemm",
            precision: str = "auto", memory_budget: str | None = None,
            cluster_options: dict[str, Any] | None = None,
            repeats: int = 5, report: str | None = None, echo: Echo | None = None,
            copies: int | None = None, deformation: str | None = None,
            dtype: str = "uint8", starting: StartingCluster | None = None,
            warm_up: bool = True) -> dict[str, Any]:
    """Run KNN end to end and return every number the CLI prints.

    ``dtype`` is how the rows live on the workers: ``"uint8"`` as loaded, or ``"float32"``.
    ``starting``: the cluster, already starting (see :func:`session`); ``warm_up``: have
    the workers compile the search's kernels first (where ``starting`` was not asked
    to already).
    """
    say = echo or (lambda message: None)
    cold = Phases(say)
    t0 = starting.asked[0] if starting is not None else time.perf_counter()
    with session("knn", cold, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, starting=starting,
                 warm_up=begin(knn_spec(dtype=dtype, dataset=dataset, precision=precision,
                                        method=method, k=n_neighbors, weights=weights,
                                        plan=plan, workers=(cluster_options or {}).get(
                                            "workers")), say) if warm_up else None) as s:
        client, parts = s.cluster.client, s.data
        say("[3/4] transfer (queries sharded, training set placed by plan)")
        clf = KNeighborsClassifier(n_neighbors, weights=weights, plan=plan, method=method,
                                   precision=precision, memory_budget=memory_budget,
                                   margin=JOB_MARGIN)
        with cold("transfer"):  # the queries keep their own dtype (uint8 pixels: 1 byte each)
            started = time.perf_counter()
            queries = shard(parts.X_test, client, timeout=s.wait_timeout,
                            dtype=cast_to(dtype))
            sharded = time.perf_counter()
            clf.fit(rows_as_dtype(parts.X_train, client, dtype, s.wait_timeout), parts.y_train)
            steps = {"queries sharded": sharded - started, "fit": time.perf_counter() - sharded}
        say("[4/4] predict: cold, then warm")
        pred = predict_phases(clf, queries, client, s.wait_timeout, cold)
        cold_total = time.perf_counter() - t0
        started = time.perf_counter()
        to_host(clf.predict(queries, on_host=True))  # the first fused predict (a new graph size)
        steps["first fused predict"] = time.perf_counter() - started
        warm_phases = []
        for _ in range(max(1, repeats)):
            warm = Phases()
            predict_phases(clf, queries, client, s.wait_timeout, warm)
            warm_phases.append(warm)
        warm_runs = [w.seconds for w in warm_phases]
        fused = []
        for _ in range(max(1, repeats)):
            warm = Phases()
            started = time.perf_counter()
            with warm("fused predict"):
                to_host(clf.predict(queries, on_host=True))
            fused.append(time.perf_counter() - started)
            warm_phases.append(warm)
        result = {
            **summary(s, "knn", fraction, seed),
            "n_neighbors": n_neighbors, "weights": weights, "method": method,
            "dtype": str(queries.dtype),
            "plan": clf.plan_, "device": clf.layout_.device, "precision": clf.precision_,
            "precision_note": clf.precision_note_, "exact_keys": clf.exact_keys_,
            "neighbours": "exact: 8-bit data are exact in every precision"
                          if clf.exact_keys_ else "exact: float64 re-rank, certified by a bound",
            **placement(client, {"query shard": queries,
                                  "train copy" if clf.plan_ == "replicate" else "train shard":
                                  clf.layout_.keep[0]}),
            "accuracy": accuracy(pred, parts.y_test), "predictions_sha256": fingerprint(pred),
            "cold": {**cold.seconds, "total": cold_total},
            "cold_windows": cold.windows,
            "cold_steps": steps,
            "warm": {name: statistics.median(r[name] for r in warm_runs) for name in warm_runs[0]},
            "warm_predict_seconds": fused,
            "warm_predict_median": statistics.median(fused),
            "bytes_between_workers": transfers.by_phase(client, cold, warm_phases,
                                                        repeats=max(1, repeats)),
            **searched(client, s, clf),
        }
    result["cold_steps"]["cluster stop"] = cold.seconds.pop("cluster stop")
    return result
