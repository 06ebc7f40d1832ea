"""End-to-end jobs behind the CLI: load, start, transfer, fit, predict, cold and warm.

A job returns a plain dictionary (what ``--json`` writes) so the benchmark
sweeps, workflows and the CLI share one code path.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import statistics
import sys
import time
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
from distributed import futures_of, performance_report, wait

from . import __version__, config, transfers
from ._compat import scheduler_workers, visible_gpus
from .cluster import RunningCluster, StartingCluster, connect
from .data import Split, load_dataset, shard, shard_locations, split
from .data.deformed import DeformedSpec, deformed_sources, deformed_spec, deformed_train
from .data.shard import cast_to, pixel_rows, placement_problems, rows_as_dtype
from .data.split import keep_labels
from .files import atomic_file
from .knn import KNeighborsClassifier, accuracy, to_host
from .timing import Phases

Echo = Callable[[str], None]


def machine() -> dict[str, Any]:
    gpus = visible_gpus()
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "mgpu_dask": __version__,
            "gpus": [f"{g.name} ({g.memory_bytes / 2**30:.0f} GiB)" for g in gpus]}


@contextlib.contextmanager
def _report(path: str | None) -> Iterator[None]:
    """A Dask performance report written atomically (temporary name, then rename), with
    Bokeh's JavaScript inline so that it opens without internet (cluster nodes)."""
    if not path:
        yield
        return
    with atomic_file(path) as tmp, performance_report(filename=str(tmp), mode="inline"):
        yield  # Bokeh inline: the report opens offline


class Session(NamedTuple):
    data: Split
    dataset: Any
    cluster: RunningCluster
    wait_timeout: float
    deformed: DeformedSpec | None = None


@contextlib.contextmanager
def session(task: str, phases: Phases, *, dataset: str | None, data_dir: str | None,
            download: bool, fraction: float, test_size: float, seed: int,
            cluster_options: dict[str, Any] | None, report: str | None,
            say: Echo, copies: int | None = None,
            deformation: str | None = None,
            classes: list[int] | None = None,
            starting: StartingCluster | None = None) -> Iterator[Session]:
    """Load and split the data, start the cluster (timed), make its client current.

    A ``NAME-deformed`` data set's training part is then replaced by
    ``copies`` deformed copies of it, generated on the workers (timed as
    ``generate``).  ``starting``: a cluster already starting on its own thread
    (the CLI asks for it before importing this module); its ``cluster start`` is
    then the whole start, most of it while this process imported and loaded.
    """
    options = dict(cluster_options or {})
    spec = deformed_spec(dataset, copies, deformation, seed)
    wait_timeout = options.get("timeout") or config.seconds("cluster.compute-timeout")
    say(f"[1/4] data ({task})")
    with phases("load"):
        ds = load_dataset(dataset, data_dir=data_dir, download=download, seed=seed)
        parts = split(ds.X, ds.y, test_size=test_size, seed=seed, fraction=fraction)
        if classes:
            parts = keep_labels(parts, classes)
    if ds.note:
        say(f"note: {ds.note}")
    say("[2/4] cluster")
    stopping: dict[str, float] = {}

    def stopped() -> None:  # registered first, so it runs last: after the cluster has closed
        if "from" in stopping:  # not when the cluster failed to start: its error goes on
            phases.seconds["cluster stop"] = time.perf_counter() - stopping["from"]

    with contextlib.ExitStack() as stack:  # exits with the error, if any: no report then
        stack.callback(stopped)
        with phases("cluster start"):
            rc = stack.enter_context(starting if starting is not None else connect(**options))
        if starting is not None and starting.ready is not None:  # from the asking on
            phases.seconds["cluster start"] = starting.seconds
            phases.windows["cluster start"] = [(starting.asked[1], starting.ready[1])]
        stack.enter_context(rc.client.as_current())  # estimators use the active client
        stack.enter_context(_report(report))
        stack.callback(lambda: stopping.setdefault("from", time.perf_counter()))
        say(f"  dashboard: {rc.dashboard_link}")
        if spec is not None:
            say(f"  generating {spec.copies} copies of {len(parts.X_train)} training images "
                "on the workers")
            with phases("generate"):
                X_gen, y_gen = deformed_train(parts.X_train, parts.y_train, rc.client, spec,
                                              timeout=wait_timeout)
            parts = parts._replace(X_train=X_gen, y_train=y_gen,
                                   train_index=deformed_sources(parts.train_index, spec.copies))
        yield Session(parts, ds, rc, wait_timeout, spec)


def _summary(s: Session, task: str, fraction: float, seed: int) -> dict[str, Any]:
    client = s.cluster.client
    deformed = ({"copies": s.deformed.copies, "deformation": s.deformed.deformation._asdict()}
                if s.deformed is not None else {})
    return {**deformed,"task": task, "command": " ".join(sys.argv), "machine": machine(),
            "dataset": s.dataset.name, "data_source": s.dataset.source, "note": s.dataset.note,
            "n_train": int(len(s.data.X_train)), "n_test": int(len(s.data.X_test)),
            "n_features": int(s.data.X_train.shape[1]), "fraction": fraction, "seed": seed,
            "fraction_note": (f"fraction {fraction:g} > 1 repeats every row exactly: each KNN "
                              f"neighbour appears about {fraction:g} times, so KNN accuracy is "
                              "lower than on the real data" if fraction > 1 and task == "knn" else None),
            "cluster": s.cluster.plan.kind.value, "dashboard": s.cluster.dashboard_link,
            "protocol": str(client.scheduler.address).split("://")[0],
            "workers": len(scheduler_workers(client))}


def _placement(client: Any, arrays: dict[str, Any]) -> dict[str, Any]:
    """Every holder of every block of these arrays, and what is wrong with that placement.

    ``shards`` lists the first array's blocks (the CLI prints them);
    ``placement`` all of them, one entry per (block, holder).
    """
    n_workers = len(scheduler_workers(client))
    placement, problems = {}, []
    for what, array in arrays.items():
        infos = shard_locations(array, client)
        placement[what] = [x._asdict() for x in infos]
        problems += placement_problems(infos, n_workers, what)
    return {"shards": next(iter(placement.values())), "placement": placement,
            "placement_problems": problems}


def _predict_phases(clf: KNeighborsClassifier, queries: Any, timeout: float,
                    phases: Phases) -> np.ndarray:
    with phases("distances+top-k"):
        cand = clf.kneighbors_candidates(queries)
        wait(futures_of(cand), timeout=timeout)
    with phases("vote"):
        pred = to_host(clf.predict_from_candidates(cand), timeout)
    del cand
    return pred


def knn_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
            fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, n_neighbors: int = 3,
            weights: str = "distance", plan: str = "auto", method: str = "gemm",
            precision: str = "auto", memory_budget: str | None = None,
            cluster_options: dict[str, Any] | None = None,
            repeats: int = 5, report: str | None = None, echo: Echo | None = None,
            copies: int | None = None, deformation: str | None = None,
            dtype: str = "uint8", starting: StartingCluster | None = None) -> dict[str, Any]:
    """Run KNN end to end and return every number the CLI prints.

    ``dtype`` is how the rows live on the workers: ``"uint8"`` as loaded, or ``"float32"``.
    ``starting``: the cluster, already starting (see :func:`session`).
    """
    say = echo or (lambda message: None)
    cold = Phases(say)
    t0 = starting.asked[0] if starting is not None else time.perf_counter()
    with session("knn", cold, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, starting=starting) as s:
        client, parts = s.cluster.client, s.data
        say("[3/4] transfer (queries sharded, training set placed by plan)")
        clf = KNeighborsClassifier(n_neighbors, weights=weights, plan=plan, method=method,
                                   precision=precision, memory_budget=memory_budget)
        with cold("transfer"):  # the queries keep their own dtype (uint8 pixels: 1 byte each)
            started = time.perf_counter()
            queries = shard(parts.X_test, client, timeout=s.wait_timeout,
                            dtype=cast_to(dtype))
            sharded = time.perf_counter()
            clf.fit(rows_as_dtype(parts.X_train, client, dtype, s.wait_timeout), parts.y_train)
            steps = {"queries sharded": sharded - started, "fit": time.perf_counter() - sharded}
        say("[4/4] predict: cold, then warm")
        pred = _predict_phases(clf, queries, s.wait_timeout, cold)
        cold_total = time.perf_counter() - t0
        started = time.perf_counter()
        to_host(clf.predict(queries, on_host=True))  # the first fused predict (a new graph size)
        steps["first fused predict"] = time.perf_counter() - started
        warm_phases = []
        for _ in range(max(1, repeats)):
            warm = Phases()
            _predict_phases(clf, queries, s.wait_timeout, warm)
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
            **_summary(s, "knn", fraction, seed),
            "n_neighbors": n_neighbors, "weights": weights, "method": method,
            "dtype": str(queries.dtype),
            "plan": clf.plan_, "device": clf.layout_.device, "precision": clf.precision_,
            "precision_note": clf.precision_note_, "exact_keys": clf.exact_keys_,
            "neighbours": "exact: 8-bit data are exact in every precision"
                          if clf.exact_keys_ else "exact: float64 re-rank, certified by a bound",
            **_placement(client, {"query shard": queries,
                                  "train copy" if clf.plan_ == "replicate" else "train shard":
                                  clf.layout_.keep[0]}),
            "accuracy": accuracy(pred, parts.y_test),
            "cold": {**cold.seconds, "total": cold_total},
            "cold_steps": steps,
            "warm": {name: statistics.median(r[name] for r in warm_runs) for name in warm_runs[0]},
            "warm_predict_seconds": fused,
            "warm_predict_median": statistics.median(fused),
            "bytes_between_workers": transfers.by_phase(client, cold, warm_phases,
                                                        repeats=max(1, repeats)),
        }
    result["cold_steps"]["cluster stop"] = cold.seconds.pop("cluster stop")
    return result


def logreg_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
               fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, C: float = 1.0,
               max_iter: int = 100, tol: float = 1e-4, comm: str = "auto",
               optimizer: str = "auto", precision: str = "auto",
               cluster_options: dict[str, Any] | None = None, repeats: int = 3,
               report: str | None = None, echo: Echo | None = None,
               copies: int | None = None, deformation: str | None = None,
               classes: list[int] | None = None, dtype: str = "uint8",
               starting: StartingCluster | None = None) -> dict[str, Any]:
    """Logistic regression end to end (pixels scaled to [0, 1]); every number the CLI prints.

    ``classes`` keeps only the rows of those labels (``[3, 8]``: the binary problem).
    ``dtype``: the rows on the workers, ``"uint8"`` as loaded (the estimator's
    ``input_scale`` puts them in [0, 1]) or ``"float32"`` (scaled copies, 4x the bytes);
    the same model either way.  ``starting``: the cluster, already starting.
    """
    from .logreg import LogisticRegression

    say = echo or (lambda message: None)
    cold = Phases(say)
    t0 = starting.asked[0] if starting is not None else time.perf_counter()
    with session("logreg", cold, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, classes=classes,
                 starting=starting) as s:
        client, parts = s.cluster.client, s.data
        scale = 1.0 / max(1.0, float(s.dataset.X.max()))  # pixels to [0, 1]
        say("[3/4] transfer (train and test sharded, one shard per worker)")
        with cold("transfer"):  # host rows sharded; generated ones stay or are cast in place
            X_train, X_test, input_scale = pixel_rows(
                parts.X_train, parts.X_test, client, scale, keep_bytes=cast_to(dtype) is None,
                timeout=s.wait_timeout)
            # The labels live beside their rows: no fit sends them again.
            y_train = shard(parts.y_train, client, like=X_train, timeout=s.wait_timeout)
        say("[4/4] fit and predict: cold, then warm")
        runs, warm_phases = [], []
        for i in range(1 + max(1, repeats)):
            phases = cold if i == 0 else Phases()
            clf = LogisticRegression(C=C, max_iter=max_iter, tol=tol, comm=comm,
                                     optimizer=optimizer, precision=precision,
                                     input_scale=input_scale)
            with phases("fit"):
                clf.fit(X_train, y_train)
            with phases("predict"):
                pred = to_host(clf.predict(X_test, on_host=True))
            if i == 0:
                cold_total = time.perf_counter() - t0
            else:
                runs.append(phases.seconds)
                warm_phases.append(phases)
        warm_totals = [r["fit"] + r["predict"] for r in runs]
        return {
            **_summary(s, "logreg", fraction, seed),
            "C": C, "max_iter": max_iter, "tol": tol, "classes": classes,
            "dtype": str(X_train.dtype),
            "device": "gpu" if type(X_train._meta).__module__.startswith("cupy") else "cpu",
            **_placement(client, {"train shard": X_train, "test shard": X_test}),
            "accuracy": accuracy(pred, parts.y_test), "n_iter": clf.n_iter_,
            "round_trips": clf.n_round_trips_, "evaluations": clf.n_evaluations_,
            "comm": clf.comm_, "optimizer": clf.optimizer_, "comm_note": clf.comm_note_,
            "precision": precision, "evaluation": clf.fit_profile_.get("evaluation"),
            "recoveries": clf.n_recoveries_,
            "fit_profile": clf.fit_profile_,
            "loss": clf.loss_, "converged": clf.converged_, "stop_reason": clf.stop_reason_,
            "gradient_max": clf.gradient_max_,
            "cold": {**cold.seconds, "total": cold_total},
            "warm": {name: statistics.median(r[name] for r in runs) for name in runs[0]},
            "warm_fit_predict_seconds": warm_totals,
            "warm_fit_predict_median": statistics.median(warm_totals),
            "bytes_between_workers": transfers.by_phase(client, cold, warm_phases),
        }


def compare_job(task: str, backends: list[str], *, dataset: str | None = None,
                data_dir: str | None = None, download: bool = True, fraction: float = 1.0,
                test_size: float = 0.25, seed: int = 0, options: dict[str, Any] | None = None,
                cluster_options: dict[str, Any] | None = None, report: str | None = None,
                echo: Echo | None = None, copies: int | None = None,
                deformation: str | None = None,
                classes: list[int] | None = None) -> dict[str, Any]:
    """Every requested backend on the same split and cluster: one row each.

    A backend that cannot run here, or fails, is one row with its reason.
    """
    from .backends import BackendRun, BackendSkipped, module, unavailable

    say = echo or (lambda message: None)
    phases = Phases(say)
    with session(task, phases, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, classes=classes) as s:
        device = "gpu" if s.cluster.plan.device == "gpu" else "cpu"
        run = BackendRun(s.data, s.cluster.client, device, dict(options or {}), s.wait_timeout)
        rows = []
        predictions: dict[str, Any] = {}  # each row's last test predictions (not written)
        for name in backends:
            reason = unavailable(name, device)
            if reason is None:
                say(f"[backend] {name}")
                try:
                    out = getattr(module(name), task)(run)
                except BackendSkipped as exc:
                    reason = f"skipped: {exc}"
                except Exception as exc:  # one line in the table, never a crash of the comparison
                    reason = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            if reason is not None:
                rows.append({"backend": name, "status": reason})
                continue
            warm = {k: statistics.median(r[k] for r in out["warm"]) for k in ("fit", "predict")}
            predictions[name] = out.get("predictions")
            rows.append({"backend": name, "status": "ok", "note": out.get("note"),
                         "accuracy": out["cold"]["accuracy"], "cold": out["cold"], "warm": warm,
                         "warm_total": warm["fit"] + warm["predict"]})
        reference = next((r for r in rows if r["backend"] == "cuml" and r["status"] == "ok"), None)
        exact = predictions.get("sklearn")
        for r in rows:
            if r["status"] == "ok" and reference:
                r["speedup_vs_cuml"] = reference["warm_total"] / r["warm_total"]
            mine = predictions.get(r["backend"])
            if r["status"] == "ok" and exact is not None and mine is not None:
                r["differ_from_sklearn"] = int((np.asarray(mine) != exact).sum())
        return {**_summary(s, task, fraction, seed), "options": options, "device": device,
                "classes": classes,
                "setup": phases.seconds, "backends": rows}
