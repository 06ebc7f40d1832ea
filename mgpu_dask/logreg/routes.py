"""Which route a fit takes, and the checks each route needs first.

With a client: single-host where it can (and ``comm`` allows), else by
messages; without one: the device L-BFGS on this process's GPU, else a graph
per evaluation.  Each returns the fit's result dictionary with what the
estimator reports besides the solution: ``comm_note`` (why not single-host,
or how a lost worker was handled), ``recoveries``, and the ``classes`` where
they were found on the workers.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..data.sharding import shard
from ..exceptions import DataError
from ..parallel import labels as labels_mod
from ..parallel import placement
from ..parallel.first_use import announce_compiles
from ..parallel.inputs import all_finite, device_of
from . import single_host
from .problem import NOT_FINITE, Problem


def announce(X: Any, problem: Problem, client: Any) -> None:
    """Warn before a fit whose kernels are not in the workers' cache (``first_use``): the
    fit's kind as ``warmup.Fit`` has it, from the rows and the problem."""
    dtype = np.dtype(X.dtype).name
    announce_compiles("logreg", f"{dtype} rows of {problem.d} features", {
        "gpu": device_of(X) == "gpu", "dtype": dtype, "n_features": problem.d,
        "precision": problem.precision.value, "n_classes": problem.n_classes or 2,
        "optimizer": problem.optimizer,
        "scale": problem.scale}, client, stacklevel=3)  # here, fit, the caller


def here(X: Any, y: Any, problem: Problem, weights: Any = None) -> dict[str, Any]:
    """No client: the device L-BFGS over CuPy blocks, else a graph per evaluation;
    ``weights``: each row's weight, chunked as ``X``'s rows, or None."""
    from .local import fit_here_on_device  # the L-BFGS's kernels: only where a fit runs here

    result = fit_here_on_device(X, y, problem, weights=weights)
    return result if result is not None else by_messages(X, y, None, 0.0, problem,
                                                         weights=weights)


def _persisted(X: Any, rows: Any, client: Any, timeout: float) -> tuple[Any, Any]:
    """``X`` persisted on the cluster and its row blocks' futures and holders (``rows``:
    those :func:`.placement.locate` found already, or None)."""
    if rows is None:
        rows = placement.locate(client, X)
    if rows is not None:
        return X, rows
    from distributed import futures_of, wait

    X = client.persist(X)
    wait(futures_of(X), timeout=timeout)
    return X, placement.locate(client, X)


def on_cluster(X: Any, rows: Any, labels: Any, held: Any, client: Any, timeout: float,
               problem: Problem, comm: str) -> dict[str, Any]:
    """Single-host where it can (and ``comm`` asks), else by messages.

    ``rows``: X's row futures and holders (None: X is not persisted yet).
    ``labels``: the class indices (NumPy), or, where ``held`` (their blocks'
    futures and holders), the dask labels persisted beside the rows.
    """
    X, rows = _persisted(X, rows, client, timeout)
    found: dict[str, Any] = {"comm_note": None, "recoveries": 0}
    if comm != "actors":
        outcome = single_host.fit_single_host(X, rows, labels if held is None else held[0],
                                              client, timeout, problem,
                                              strict=comm == "single-host")
        found = {"comm_note": outcome.note, "recoveries": outcome.recoveries}
        if outcome.result is not None:
            return {**outcome.result, **found}
    if held is not None:  # by messages: the classes first, then codes where labels live
        classes = labels_mod.at_least_two(single_host.held_classes(client, held,
                                                                   problem.classes))
        problem = problem._replace(n_classes=len(classes))
        found["classes"] = classes
        y = placement.map_blocks(client, labels_mod.codes, labels, classes,
                                 name=placement.fresh_name("label-codes"), chunks=labels.chunks,
                                 meta=labels._meta.astype(np.int32))
    else:  # each label block goes to the worker holding its rows
        y = shard(labels, client, device=device_of(X), dtype=np.int32, timeout=timeout, like=X)
    result = by_messages(X, y, client, timeout, problem)
    return {**result, **found, "recoveries": found["recoveries"] + result.pop("rebuilds")}


def weighted(X: Any, rows: Any, codes: np.ndarray, weights: np.ndarray, client: Any,
             timeout: float, problem: Problem, comm: str = "auto") -> dict[str, Any]:
    """Rows weighted (sample or class weights): as unweighted rows go (the device L-BFGS
    here, single-host on a cluster where ``comm`` allows), each shard's weights sent with
    its labels; else by messages, the labels and each row's weight placed beside its row
    block (``comm_note`` says why).  ``rows`` as for :func:`on_cluster`."""
    if client is None:
        chunks = (X.chunks[0],)
        return here(X, da.from_array(codes, chunks=chunks), problem,
                    weights=da.from_array(weights, chunks=chunks))
    X, rows = _persisted(X, rows, client, timeout)
    note = None
    if comm != "actors":
        outcome = single_host.fit_single_host(X, rows, codes, client, timeout, problem,
                                              strict=comm == "single-host", weights=weights)
        if outcome.result is not None:
            return {**outcome.result, "comm_note": outcome.note,
                    "recoveries": outcome.recoveries}
        note = outcome.note
    device = device_of(X)
    y = shard(codes, client, device=device, dtype=np.int32, timeout=timeout, like=X)
    w = shard(weights, client, device=device, dtype=np.float32, timeout=timeout, like=X)
    result = by_messages(X, y, client, timeout, problem, weights=w)
    return {**result, "comm_note": note, "recoveries": result.pop("rebuilds")}


def by_messages(X: Any, y: Any, client: Any, timeout: float, problem: Problem,
                weights: Any = None) -> dict[str, Any]:
    """L-BFGS on the client, one message round per evaluation (any cluster); ``weights``:
    each row's sample weight, a dask array placed as ``X``'s rows."""
    from ..kernels.lbfgs.rules import rounding_of
    from .actors import ActorEvaluator  # this route's own modules: the others never load them
    from .local import GraphEvaluator
    from .solvers import lbfgs_on_host

    if problem.optimizer == "device":
        raise DataError("optimizer='device' needs a single-host fit (comm='auto' or "
                        "'single-host', every shard on a GPU of one host)")
    if not all_finite(X):
        raise DataError(NOT_FINITE)
    evaluate = (ActorEvaluator(X, y, client, timeout, problem.precision, problem.scale,
                               weights=weights)
                if client is not None else GraphEvaluator(X, y, problem.precision, problem.scale,
                                                          weights=weights))
    try:  # the values' rounding from what the evaluations ran (int8's: exact sums)
        result = lbfgs_on_host(evaluate, problem, lambda: rounding_of(
            evaluate.products().get("precision", "").split(",")))
        ran = evaluate.products()
    finally:
        evaluate.close()
    return {**result, **ran, "round_trips": evaluate.calls, "optimizer": "host",
            "comm": "actors" if client is not None else "graph",
            "rebuilds": getattr(evaluate, "rebuilds", 0)}
