"""What a fitted logistic regression runs on each row block where it lives: the most
probable class and the class probabilities.  Imports no scikit-learn (workers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.launch import array_module, as_numpy
from ..kernels.logreg import decision


def predict_block(X: Any, coef: np.ndarray, intercept: np.ndarray, classes: np.ndarray,
                  host: bool = False) -> Any:
    """``classes[argmax(X coef + intercept)]`` per row (NumPy when ``host``)."""
    xp = array_module(X)
    pred = xp.asarray(classes)[decision(X, coef, intercept).argmax(axis=1)]
    return as_numpy(pred) if host else pred


def proba_block(X: Any, coef: np.ndarray, intercept: np.ndarray, host: bool = False) -> Any:
    """Softmax probabilities per row (float64; NumPy when ``host``)."""
    xp = array_module(X)
    z = decision(X, coef, intercept).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = xp.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return as_numpy(p) if host else p
