"""Plain CuPy array code on the same dask shards (the seed study's CuPy version).

No custom kernels: KNN is a GEMM, ``argpartition`` and a scatter-add vote per
query shard against a per-worker copy of the training set; logistic
regression's loss and gradient are CuPy expressions evaluated where each shard
lives, under our host L-BFGS (:mod:`.on_shards`).  The functions are written
against the array module of their inputs, so tests run them on NumPy.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..data import shard
from ..kernels.launch import array_module, as_numpy
from ..kernels.precision import Precision
from ..logreg.problem import Problem
from ..parallel import placement
from ..parallel.inputs import to_host
from .backend import DASK, BackendRun, BackendSkipped, Placing, converted_note, repeat
from .on_shards import each_copy, fit_by_tasks, place_copies, predict_on_copies, scaled_rows


def knn_block(Q: Any, T: Any, labels: Any, norms: Any, k: int, weights: str,
              n_classes: int, tile_bytes: int = 1 << 30) -> Any:
    """Predicted class indices for the rows of ``Q`` against ``T``: array code only.

    Queries go in row tiles whose score matrix stays under ``tile_bytes``
    (the whole 17,500 x 210,000 one would not fit in a GPU).
    """
    xp = array_module(T)
    Q = xp.asarray(Q, dtype=np.float32)
    step = max(1, tile_bytes // (8 * max(1, T.shape[0])))
    if Q.shape[0] > step:
        return xp.concatenate([knn_block(Q[i:i + step], T, labels, norms, k, weights, n_classes,
                                         tile_bytes) for i in range(0, Q.shape[0], step)])
    score = norms[None, :] - 2.0 * (Q @ T.T)               # |t|^2 - 2 q.t ranks like |q - t|^2
    nearest = xp.argpartition(score, k - 1, axis=1)[:, :k]
    sq = xp.take_along_axis(score, nearest, axis=1) + (Q * Q).sum(axis=1, keepdims=True)
    return vote(xp.sqrt(xp.maximum(sq, 0.0)), labels[nearest], weights, n_classes)


def vote(dist: Any, neighbour_labels: Any, weights: str, n_classes: int) -> Any:
    """Class index per row from its neighbours' distances and class indices (rows x k):
    uniform, or weighted by 1 / distance with exact matches taking the vote."""
    xp = array_module(dist)
    if weights == "uniform":
        w = xp.ones(dist.shape, dtype=np.float64)
    else:
        dist = dist.astype(np.float64)
        exact = dist == 0
        w = xp.where(exact.any(axis=1, keepdims=True), exact.astype(dist.dtype),
                     1.0 / xp.where(exact, 1.0, dist))
    votes = xp.zeros((dist.shape[0], n_classes), dtype=np.float64)
    rows = xp.broadcast_to(xp.arange(dist.shape[0])[:, None], dist.shape)
    xp.add.at(votes, (rows, neighbour_labels), w)
    return votes.argmax(axis=1).astype(np.int32)


def loss_grad(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray) -> tuple:
    """Summed cross-entropy and gradient of one shard, as array expressions."""
    xp = array_module(X)
    logits = X @ xp.asarray(coef, dtype=X.dtype) + xp.asarray(intercept, dtype=X.dtype)
    logits = logits - logits.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(logits).sum(axis=1, keepdims=True))
    proba = xp.exp(logits - lse)
    rows = xp.arange(X.shape[0])
    loss = float((lse[:, 0] - logits[rows, labels]).sum())
    proba[rows, labels] -= 1.0
    grad_coef, grad_intercept = X.T @ proba, proba.sum(axis=0)
    host = (lambda a: a.get()) if hasattr(grad_coef, "get") else np.asarray
    return loss, host(grad_coef).astype(np.float64), host(grad_intercept).astype(np.float64)


def to_device(X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    """The training rows and their class indices on this worker's device, as they are."""
    xp = device_module()
    return xp.asarray(X), xp.asarray(y, dtype=np.int32)


def prepare_rows(copy: tuple[Any, Any]) -> tuple[Any, Any, Any]:
    """A worker's training copy for the array-code KNN, from its rows on the device:
    float32 rows (uint8 pixels shifted by 128, which changes no distance and keeps every
    product exact in float32), their squared norms and the class indices."""
    X, y = copy
    T = X.astype(np.float32)
    if X.dtype == np.uint8:
        T -= np.float32(128)
    return T, (T * T).sum(axis=1), y


def device_module() -> Any:
    """CuPy on a worker that has a GPU and CuPy, else NumPy."""
    from ..config.environment import has_gpu

    if has_gpu():
        import cupy

        return cupy
    return np


def shifted_queries(Qb: Any, T: Any) -> Any:
    """Query rows as the copy's rows were made (float32, uint8 pixels shifted by 128)."""
    xp = array_module(T)
    Q = xp.asarray(Qb, dtype=np.float32)
    return Q - np.float32(128) if Qb.dtype == np.uint8 else Q


def _array_block(Qb: Any, copy: tuple, k: int, weights: str, n_classes: int) -> np.ndarray:
    """One query block against this worker's copy, in plain array code; host predictions."""
    T, norms, labels = copy
    pred = knn_block(shifted_queries(Qb, T), T, labels, norms, k, weights, n_classes)
    return as_numpy(pred)


def knn_on_copies(run: BackendRun, prepare: Any, block: Any, framework: str,
                  *block_args: Any) -> dict[str, Any]:
    """A KNN backend on our replicated placement: the training rows copied to every
    worker's device and the queries sharded (the placement, timed apart), then
    ``prepare(copy)`` on every worker (the timed fit) and ``block(query_rows, copy, k,
    weights, n_classes, *block_args)`` on every query shard where it lives (the timed
    predict)."""
    p, o = run.parts, run.options
    if not isinstance(p.X_train, np.ndarray):
        raise BackendSkipped(f"{framework} copies the training set to every worker; rows "
                             "generated on the workers stay where they are")
    classes = np.unique(p.y_train)
    codes = np.searchsorted(classes, p.y_train).astype(np.int32)
    with Placing() as placing:
        queries = (shard(p.X_test, run.client, timeout=run.timeout) if run.client is not None
                   else da.from_array(p.X_test, chunks=(-1, -1)))
        rows = place_copies(run.client, to_device, p.X_train, codes, timeout=run.timeout)
    args = (o["k"], o["weights"], len(classes), *block_args)
    out = repeat(run, lambda: each_copy(run.client, rows, prepare, run.timeout),
                 lambda copies: classes[predict_on_copies(run.client, copies, queries, block,
                                                          *args, timeout=run.timeout)])
    return {**out, "placing": placing.seconds, "timed": DASK}


def fit_logreg(run: BackendRun, loss_grad: Any) -> dict[str, Any]:
    """Our host L-BFGS over a backend's per-shard ``loss_grad`` (float32 rows scaled to
    [0, 1], class indices beside them), one task per shard and evaluation; the predict
    is the backend-independent ``argmax`` on the test shards."""
    from ..logreg.blocks import predict_block

    o, client = run.options, run.client
    if client is None:
        raise BackendSkipped("runs on the cluster's workers; start one")
    X, Xt, y, classes, placing = scaled_rows(run, np.int32)
    n, d = int(X.shape[0]), int(X.shape[1])
    problem = Problem(n, d, len(classes), 1.0 / (o["C"] * n), o["max_iter"], o["tol"], "host",
                      Precision.FP32, None)

    def fit() -> tuple[np.ndarray, np.ndarray]:
        theta = fit_by_tasks(client, X, y, loss_grad, problem, run.timeout)["x"]
        return theta[: d * len(classes)].reshape(d, -1), theta[d * len(classes):]

    def predict(model: tuple) -> np.ndarray:
        pred = placement.map_blocks(client, predict_block, Xt, *model, classes, True,
                                    name=placement.fresh_name("predict"),
                                    chunks=(Xt.chunks[0],), meta=np.empty(0, classes.dtype))
        return to_host(pred, run.timeout)

    return {**repeat(run, fit, predict), "placing": placing, "timed": DASK}


def knn(run: BackendRun) -> dict[str, Any]:
    return {**knn_on_copies(run, prepare_rows, _array_block, "the plain CuPy KNN"),
            "note": converted_note(run)}


def logreg(run: BackendRun) -> dict[str, Any]:
    return fit_logreg(run, loss_grad)
