"""Our estimators (Numba kernels through Dask) as a comparison backend."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..data import shard
from ..data.shard import cast_to, pixel_rows, rows_as_dtype
from ..knn import KNeighborsClassifier, to_host
from . import BackendRun, pixel_scale


def repeat(run: BackendRun, fit: Any, predict: Any) -> dict[str, Any]:
    """One cold and ``repeats`` warm (fit, predict) timings with the accuracy of each, and
    the last repetition's host predictions (``predictions``: compared, never written)."""
    rows = []
    for _ in range(1 + max(1, int(run.options.get("repeats", 1)))):
        started = time.perf_counter()
        model = fit()
        fitted = time.perf_counter()
        pred = predict(model)
        done = time.perf_counter()
        rows.append({"fit": fitted - started, "predict": done - fitted,
                     "accuracy": float((pred == run.parts.y_test).mean())})
    return {"cold": rows[0], "warm": rows[1:], "predictions": np.asarray(pred)}


def knn(run: BackendRun, cls: Any = KNeighborsClassifier) -> dict[str, Any]:
    o, p = run.options, run.parts
    dtype = o.get("dtype")
    queries = shard(p.X_test, run.client, timeout=run.timeout, dtype=cast_to(dtype))
    train = rows_as_dtype(p.X_train, run.client, dtype, run.timeout)
    return repeat(run, lambda: cls(o["k"], weights=o["weights"]).fit(train, p.y_train),
                  lambda model: to_host(model.predict(queries, on_host=True), run.timeout))


def logreg(run: BackendRun, loss_grad: Any = None) -> dict[str, Any]:
    """Our LogisticRegression on the rows as ``--dtype`` says (uint8 as loaded with
    ``input_scale``, or scaled float32 copies); a ``loss_grad`` of another backend
    (CuPy, CUDA C) computes in float32, so its rows are float32 copies always."""
    from ..logreg import LogisticRegression

    o, p = run.options, run.parts
    X, Xt, input_scale = pixel_rows(
        p.X_train, p.X_test, run.client, pixel_scale(p.X_train),
        keep_bytes=loss_grad is None and cast_to(o.get("dtype")) is None, timeout=run.timeout)
    y = shard(p.y_train, run.client, like=X, timeout=run.timeout)  # beside their rows
    return repeat(run, lambda: LogisticRegression(C=o["C"], max_iter=o["max_iter"], tol=o["tol"],
                                                  comm=o.get("comm", "auto"),
                                                  precision=o.get("precision", "auto"),
                                                  loss_grad=loss_grad, input_scale=input_scale
                                                  ).fit(X, y),
                  lambda model: to_host(model.predict(Xt, on_host=True), run.timeout))
