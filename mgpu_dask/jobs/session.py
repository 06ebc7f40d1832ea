"""What every job shares: load and split the data, start the cluster, the phase table,
the summary of where the rows live, and the Dask performance report."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from typing import Any, Callable, Iterator, NamedTuple

from distributed import performance_report

from .. import config
from ..cluster import RunningCluster, StartingCluster, connect
from ..data import Split, load_dataset, shard_locations, split
from ..data.deformed import (
    DeformedSpec,
    deformed_sources,
    deformed_spec,
    deformed_train,
)
from ..data.files import atomic_file
from ..data.sharding import placement_problems
from ..data.split import keep_labels
from ..exceptions import CompileWarning
from ..parallel.recovery import recovery_note
from ..parallel.workers import scheduler_workers
from .machine import machine
from .phases import Phases
from .warmup import compiled_later, cupy_kernels_by_now, finish

Echo = Callable[[str], None]


@contextlib.contextmanager
def report_file(path: str | None) -> Iterator[None]:
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
    kernels: dict[str, Any] | None = None  # what the workers' warm-up compiled (warmup.finish)


@contextlib.contextmanager
def session(task: str, phases: Phases, *, dataset: str | None, data_dir: str | None,
            download: bool, fraction: float, test_size: float, seed: int,
            cluster_options: dict[str, Any] | None, report: str | None,
            say: Echo, copies: int | None = None,
            deformation: str | None = None,
            classes: list[int] | None = None,
            starting: StartingCluster | None = None,
            warm_up: Callable[[RunningCluster], Any] | None = None) -> Iterator[Session]:
    """Load and split the data, start the cluster (timed), make its client current, and
    have the workers compile what the job runs.

    ``starting``: a cluster already starting on its own thread (the CLI asks for
    it before importing this module); its ``cluster start`` is then the whole
    start, most of it while this process imported and loaded, and its
    ``on_ready`` began the workers' warm-up (:mod:`.warmup`).  Otherwise the
    cluster starts here and ``warm_up`` (:func:`.warmup.begin`'s) begins it.
    Either way its phase is ``compile`` or ``warm-up``.  A ``NAME-deformed``
    data set's training part is then replaced by ``copies`` deformed copies of
    it, generated on the workers (timed as ``generate``).
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
        if starting is not None:  # from the asking on, most of it behind the load
            rc = stack.enter_context(starting)
            phases.record("cluster start", starting.seconds, (starting.asked[1],
                                                              starting.ready[1]))
            warm = starting.after if starting.after is not None else (
                warm_up(rc) if warm_up is not None else None)
        else:
            with phases("cluster start"):
                rc = stack.enter_context(connect(**options))
            warm = warm_up(rc) if warm_up is not None else None
        stack.enter_context(rc.client.as_current())  # estimators use the active client
        stack.enter_context(warnings.catch_warnings())  # the job says what it compiles
        warnings.simplefilter("ignore", CompileWarning)
        stack.enter_context(report_file(report))
        stack.callback(lambda: stopping.setdefault("from", time.perf_counter()))
        say(f"  dashboard: {rc.dashboard_link}")
        kernels = finish(warm, phases, wait_timeout) if warm is not None else None
        if spec is not None:
            say(f"  generating {spec.copies} copies of {len(parts.X_train)} training images "
                "on the workers")
            with phases("generate"):
                X_gen, y_gen = deformed_train(parts.X_train, parts.y_train, rc.client, spec,
                                              timeout=wait_timeout)
            parts = parts._replace(X_train=X_gen, y_train=y_gen,
                                   train_index=deformed_sources(parts.train_index, spec.copies))
        yield Session(parts, ds, rc, wait_timeout, spec, kernels)


def summary(s: Session, task: str, fraction: float, seed: int) -> dict[str, Any]:
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
            "workers": len(scheduler_workers(client)),
            "kernels": s.kernels and {**s.kernels, "compiled after the warm-up":
                                      compiled_later(client, s.kernels),
                                      **cupy_kernels_by_now(client, s.kernels)},
            "kernel_caches": {v: os.environ.get(v) for v in ("NUMBA_CACHE_DIR", "CUPY_CACHE_DIR")}}


def fingerprint(predictions: Any) -> str:
    """SHA-256 of the test predictions (their dtype and bytes): runs compare by it."""
    import hashlib

    import numpy as np

    values = np.ascontiguousarray(predictions)
    return hashlib.sha256(values.dtype.str.encode() + values.tobytes()).hexdigest()


def notes(s: Session, *more: str | None) -> list[str]:
    """One line for each thing of this job that fell back from what was asked or expected:
    the cluster's start, our recovery plugin, then ``more`` (the estimator's)."""
    found = [*s.cluster.notes, recovery_note(s.cluster.client), *more]
    return list(dict.fromkeys(n for n in found if n))


def placement(client: Any, arrays: dict[str, Any]) -> dict[str, Any]:
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
