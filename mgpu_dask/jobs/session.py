"""What every job shares: load and split the data, start the cluster, the phase table,
the summary of where the rows live, and the Dask performance report."""

from __future__ import annotations

import contextlib
import sys
import time
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
from ..data.shard import placement_problems
from ..data.split import keep_labels
from ..parallel.workers import scheduler_workers
from .machine import machine
from .phases import Phases

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
        stack.enter_context(report_file(report))
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
            "workers": len(scheduler_workers(client))}


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
