"""Plain CuPy array code on the same dask shards (the seed study's CuPy version).

No custom kernels: KNN is a GEMM, ``argpartition`` and a scatter-add vote per
query shard against a per-worker copy of the training set; logistic
regression's loss and gradient are CuPy expressions.  The functions are written
against the array module of their inputs, so tests run them on NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels._launch import array_module
from ..knn import KNeighborsClassifier
from . import BackendRun, BackendSkipped, converted_note, numba_backend


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


def _array_block(Qb: Any, train: Any, yb: Any, k: int, margin: int, tile_bytes: Any,
                 vote: tuple) -> Any:
    """One query block against this worker's training copy, in plain array code.

    The copy is our fp32 operand (8-bit data shifted by ``train.shift``, which
    changes no distance), so the queries are shifted alike.
    """
    n_classes, weights, classes, host = vote
    xp = array_module(train.norms)
    T = train.operand[:train.n, :train.d]
    Q = xp.asarray(Qb, dtype=np.float32) - np.float32(train.shift if train.eight_bit else 0)
    pred = knn_block(Q, T, yb, train.norms[:train.n], k, weights, n_classes)
    if classes is not None:
        pred = array_module(pred).asarray(classes)[pred]
    return pred.get() if host and hasattr(pred, "get") else pred


class ArrayKNN(KNeighborsClassifier):
    """Our KNN's data placement (training set replicated per worker), array-code compute."""

    block_fn = staticmethod(_array_block)  # one query block against a worker's training copy


def replicated_knn(run: BackendRun, cls: type, framework: str,
                   precision: str = "fp32") -> dict[str, Any]:
    """``cls`` (an :class:`ArrayKNN`) timed like ours on the replicate plan: the host
    training set prepared once per worker in ``precision``; ``framework`` names the row
    in the reason it declines rows generated on the workers."""
    if not isinstance(run.parts.X_train, np.ndarray):
        raise BackendSkipped(f"{framework} replicates the training set on every worker; "
                             "rows generated on the workers stay where they are")
    return numba_backend.knn(
        run, cls=lambda k, weights: cls(k, weights=weights, plan="replicate",
                                        precision=precision))


def knn(run: BackendRun) -> dict[str, Any]:
    return {**replicated_knn(run, ArrayKNN, "the plain CuPy KNN"), "note": converted_note(run)}


def logreg(run: BackendRun) -> dict[str, Any]:
    return numba_backend.logreg(run, loss_grad=loss_grad)
