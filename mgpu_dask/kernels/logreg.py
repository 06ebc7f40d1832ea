"""Launch helpers for logistic regression: loss and gradient of one shard.

The dense products go to cuBLAS / BLAS; the softmax, cross-entropy and
residual are our fused kernel.  Everything returned is small host data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._launch import array_module, on_gpu, thread_grid


def softmax_xent(logits: Any, labels: Any, *, target: str | None = None) -> tuple[Any, Any]:
    """Residual ``softmax(logits) - onehot(labels)`` and per-row cross-entropy."""
    xp = array_module(logits)
    resid = xp.empty(logits.shape, dtype=logits.dtype)
    loss = xp.empty(logits.shape[0], dtype=np.float64)
    if target == "cuda" or (target is None and on_gpu(logits)):
        from . import logreg_cuda

        logreg_cuda.softmax_xent_rows[thread_grid(logits.shape[0])](logits, labels, resid, loss)
    else:
        from . import logreg_cpu

        logreg_cpu.softmax_xent_rows(logits, labels, resid, loss)
    return resid, loss


def loss_grad(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray, *,
              target: str | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Summed cross-entropy and its gradient over the rows of one shard.

    Parameters
    ----------
    X : array of shape (n, d), float32 (CuPy or NumPy)
    labels : array of shape (n,), int32 class indices
    coef : numpy.ndarray of shape (d, n_classes)
    intercept : numpy.ndarray of shape (n_classes,)

    Returns
    -------
    loss : float
        Sum of the rows' cross-entropies (no penalty, no averaging).
    grad_coef : numpy.ndarray of shape (d, n_classes), float64
    grad_intercept : numpy.ndarray of shape (n_classes,), float64
    """
    xp = array_module(X)
    W = xp.asarray(coef, dtype=X.dtype)
    b = xp.asarray(intercept, dtype=X.dtype)
    logits = X @ W
    logits += b
    resid, loss = softmax_xent(logits, labels, target=target)
    grad_coef = X.T @ resid
    grad_intercept = resid.sum(axis=0, dtype=np.float64)
    total = loss.sum()
    to_host = (lambda a: a.get()) if on_gpu(X) else np.asarray
    return (float(to_host(total)), to_host(grad_coef).astype(np.float64),
            to_host(grad_intercept).astype(np.float64))


def decision(X: Any, coef: np.ndarray, intercept: np.ndarray) -> Any:
    """Logits ``X @ coef + intercept`` in the array module of ``X``."""
    xp = array_module(X)
    logits = X @ xp.asarray(coef, dtype=X.dtype)
    logits += xp.asarray(intercept, dtype=X.dtype)
    return logits
