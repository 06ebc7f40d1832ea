"""How the array-code backends (plain CuPy, CUDA C, PyTorch per worker) run on the Dask
shards, as a Dask user would write them: our public placement, their own compute.

* KNN: the training set copied once to every worker (:func:`place_copies`),
  then one task per query shard on the worker that holds it, against that
  worker's copy (:func:`predict_on_copies`).
* Logistic regression: our host L-BFGS, each evaluation one task per training
  shard on its holder, the (loss, gradient) parts gathered and summed
  (:func:`fit_by_tasks`).

Without a distributed client everything runs in this process.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
from distributed import wait

from ..data import shard
from ..data.sharding import as_worker_rows
from ..logreg.problem import Problem, sum_parts
from ..logreg.solvers import lbfgs_on_host
from ..parallel import placement
from ..parallel.workers import worker_addresses
from .backend import BackendRun, Placing, pixel_scale

Copies = dict
"""Worker address (None without a client) -> that worker's prepared training copy."""


class ScaledRows(NamedTuple):
    X: Any               # training rows, float32 scaled to [0, 1], on the workers
    Xt: Any              # test shards, likewise
    y: Any               # each training row's class index, beside its row
    classes: np.ndarray  # the sorted classes the indices point into
    placing: float       # seconds spent placing all three


def scaled_rows(run: BackendRun, label_dtype: Any) -> ScaledRows:
    """The logistic-regression input of the array-code backends, placed from the client
    (timed): float32 rows scaled to [0, 1] and class indices of ``label_dtype``."""
    p, client = run.parts, run.client
    scale = pixel_scale(p.X_train)
    classes = np.unique(p.y_train)
    with Placing() as placing:
        X = as_worker_rows(p.X_train, client, dtype=np.float32, scale=scale,
                           timeout=run.timeout)
        Xt = shard(p.X_test, client, dtype=np.float32, scale=scale, timeout=run.timeout)
        y = shard(np.searchsorted(classes, p.y_train).astype(label_dtype), client, like=X,
                  timeout=run.timeout)
    return ScaledRows(X, Xt, y, classes, placing.seconds)


def place_copies(client: Any, make: Callable[..., Any], *data: Any, timeout: float) -> Copies:
    """``make(*data)`` on every worker, once: the host ``data`` scattered to every worker
    first (straight to them, not inside a task graph through the scheduler)."""
    if client is None:
        return {None: make(*data)}
    workers = worker_addresses(client)
    sent = client.scatter(list(data), workers=workers, broadcast=True, hash=False)
    return _landed({w: client.submit(make, *sent, workers=[w], pure=False,
                                     key=placement.fresh_name("copy")) for w in workers},
                   timeout)


def each_copy(client: Any, copies: Copies, fn: Callable[..., Any], timeout: float) -> Copies:
    """``fn(copy)`` on the worker of each copy: new copies, made where the old ones are."""
    if client is None:
        return {w: fn(c) for w, c in copies.items()}
    return _landed({w: client.submit(fn, c, workers=[w], pure=False,
                                     key=placement.fresh_name("prepared"))
                    for w, c in copies.items()}, timeout)


def _landed(copies: Copies, timeout: float) -> Copies:
    wait(list(copies.values()), timeout=timeout)
    for future in copies.values():
        if future.status == "error":
            raise future.exception()
    return copies


def predict_on_copies(client: Any, copies: Copies, queries: Any, block: Callable[..., Any],
                      *args: Any, timeout: float) -> np.ndarray:
    """``block(query_rows, copy, *args)`` -> host predictions, one task per query shard on
    its holder (a persisted dask array), concatenated in row order."""
    if client is None:
        return np.asarray(block(queries.compute(), copies[None], *args))
    futures, where = placement.locate(client, queries, remembered=True)
    tasks = [client.submit(block, q, copies[w], *args, workers=[w], pure=False,
                           key=placement.fresh_name("predict"))
             for q, w in zip(futures, where)]
    return np.concatenate(client.gather(tasks, errors="raise"))


def fit_by_tasks(client: Any, X: Any, y: Any, loss_grad: Callable[..., tuple],
                 problem: Problem, timeout: float) -> dict[str, Any]:
    """Our host L-BFGS over ``loss_grad(X_block, y_block, coef, intercept)`` on every
    training shard where it lives (``X`` and ``y`` persisted row by row alike)."""
    if client is None:
        def evaluate(coef: np.ndarray, intercept: np.ndarray) -> tuple:
            return loss_grad(X.compute(), y.compute(), coef, intercept)
    else:
        (xs, where), (ys, _) = (placement.locate(client, a) for a in (X, y))

        def evaluate(coef: np.ndarray, intercept: np.ndarray) -> tuple:
            parts = [client.submit(loss_grad, xb, yb, coef, intercept, workers=[w],
                                   pure=False, key=placement.fresh_name("loss-grad"))
                     for xb, yb, w in zip(xs, ys, where)]
            return sum_parts(client.gather(parts, errors="raise"))
    return lbfgs_on_host(evaluate, problem)
