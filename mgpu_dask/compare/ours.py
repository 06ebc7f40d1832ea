"""Our estimators (Numba kernels through Dask) as a comparison backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data import shard
from ..data.sharding import cast_to, pixel_rows, rows_as_dtype
from ..knn import KNeighborsClassifier
from ..parallel.inputs import to_host
from .backend import DASK, BackendRun, Placing, join_notes, pixel_scale, repeat


def _fitted(make: Any, kept: list) -> Any:
    """``make()``, the model also kept (the last one says what ran)."""
    kept[:] = [make()]
    return kept[0]


def knn(run: BackendRun) -> dict[str, Any]:
    """Our KNeighborsClassifier on rows sharded to the workers first (the placement, timed
    apart); each fit prepares every worker's copy of the training rows from them."""
    o, p = run.options, run.parts
    dtype, placing = o.get("dtype"), Placing()
    with placing:
        queries = shard(p.X_test, run.client, timeout=run.timeout, dtype=cast_to(dtype))
    with placing:
        train = rows_as_dtype(p.X_train, run.client, dtype, run.timeout)
        if isinstance(train, np.ndarray) and run.client is not None:
            train = shard(train, run.client, timeout=run.timeout)
    kept: list = []
    out = repeat(run, lambda: _fitted(lambda: KNeighborsClassifier(
                     o["k"], weights=o["weights"]).fit(train, p.y_train), kept),
                 lambda model: to_host(model.predict(queries, on_host=True), run.timeout))
    clf = kept[0]
    note = join_notes(f"plan {clf.plan_}, {clf.precision_} products", clf.precision_note_)
    return {**out, "placing": placing.seconds, "timed": DASK, "note": note}


def logreg(run: BackendRun) -> dict[str, Any]:
    """Our LogisticRegression on the rows as ``--dtype`` says (uint8 as loaded with
    ``input_scale``, or scaled float32 copies), the labels beside their rows."""
    from ..logreg import LogisticRegression

    o, p = run.options, run.parts
    placing = Placing()
    with placing:
        X, Xt, input_scale = pixel_rows(
            p.X_train, p.X_test, run.client, pixel_scale(p.X_train),
            keep_bytes=cast_to(o.get("dtype")) is None, timeout=run.timeout)
        y = shard(p.y_train, run.client, like=X, timeout=run.timeout)  # beside their rows
    kept: list = []
    out = repeat(run, lambda: _fitted(lambda: LogisticRegression(
                     C=o["C"], max_iter=o["max_iter"], tol=o["tol"], comm=o.get("comm", "auto"),
                     precision=o.get("precision", "auto"), input_scale=input_scale).fit(X, y),
                     kept),
                 lambda model: to_host(model.predict(Xt, on_host=True), run.timeout))
    lr = kept[0]
    note = join_notes(f"{lr.precision_} products, {lr.comm_} fit, L-BFGS on the "
                      f"{lr.optimizer_}", *lr.notes_)
    return {**out, "placing": placing.seconds, "timed": DASK, "note": note}
