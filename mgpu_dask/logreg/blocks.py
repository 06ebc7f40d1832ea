"""What a fitted logistic regression runs on each row block where it lives: the most
probable class, the class probabilities (or their logs) and the scores.  Imports no
scikit-learn (workers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.allocator import pooled
from ..kernels.launch import array_module, as_numpy
from ..kernels.logreg import decision


@pooled()
def predict_block(X: Any, coef: np.ndarray, intercept: np.ndarray, classes: np.ndarray,
                  host: bool = False) -> Any:
    """``classes[argmax(X coef + intercept)]`` per row (NumPy when ``host``)."""
    xp = array_module(X)
    pred = xp.asarray(classes)[decision(X, coef, intercept).argmax(axis=1)]
    return as_numpy(pred) if host else pred


@pooled()
def proba_block(X: Any, coef: np.ndarray, intercept: np.ndarray, log: bool = False,
                host: bool = False) -> Any:
    """Softmax probabilities per row (float64; their logs with ``log``; NumPy when
    ``host``)."""
    xp = array_module(X)
    z = decision(X, coef, intercept).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = xp.exp(z)
    total = p.sum(axis=1, keepdims=True)
    out = z - xp.log(total) if log else p / total
    return as_numpy(out) if host else out


@pooled()
def decision_block(X: Any, coef: np.ndarray, intercept: np.ndarray, two: bool = False,
                   host: bool = False) -> Any:
    """``X coef + intercept`` per row in float64 (each row's scores whatever the rows beside
    it); ``two``: the second column less the first."""
    xp = array_module(X)
    z = xp.asarray(X, dtype=np.float64) @ xp.asarray(coef, dtype=np.float64) + xp.asarray(
        intercept, dtype=np.float64)
    out = z[:, 1] - z[:, 0] if two else z
    return as_numpy(out) if host else out
