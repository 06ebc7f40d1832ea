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

from typing import Any, Callable

import numpy as np
from distributed import wait

from ..logreg.problem import Problem, lbfgs_on_host, sum_parts
from ..parallel import placement
from ..parallel.workers import worker_addresses

Copies = dict
"""Worker address (None without a client) -> that worker's prepared training copy."""


def place_copies(client: Any, prepare: Callable[..., Any], X: np.ndarray, y: np.ndarray,
                 timeout: float) -> Copies:
    """``prepare(X, y)`` on every worker, once: the rows travel with each task."""
    if client is None:
        return {None: prepare(X, y)}
    workers = worker_addresses(client)
    futures = [client.submit(prepare, X, y, workers=[w], pure=False,
                             key=placement.fresh_name("copy")) for w in workers]
    wait(futures, timeout=timeout)
    for future in futures:
        if future.status == "error":
            raise future.exception()
    return dict(zip(workers, futures))


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
