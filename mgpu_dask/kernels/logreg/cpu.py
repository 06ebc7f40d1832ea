"""Numba CPU kernel for multinomial logistic regression (the twin of
:func:`.cuda.softmax_xent_rows`, without the block sums)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, nogil=True)
def softmax_xent_rows(logits, labels, bias, resid, loss):
    n_classes = logits.shape[1]
    for row in prange(logits.shape[0]):
        top = logits[row, 0] + bias[0]
        for c in range(1, n_classes):
            top = max(top, logits[row, c] + bias[c])
        total = 0.0
        for c in range(n_classes):
            total += math.exp(np.float64(logits[row, c] + bias[c] - top))
        lse = np.float64(top) + math.log(total)
        target = labels[row]
        loss[row] = lse - np.float64(logits[row, target] + bias[target])
        for c in range(n_classes):
            z = np.float64(logits[row, c] + bias[c])
            resid[row, c] = math.exp(z - lse) - (1.0 if c == target else 0.0)


def softmax_xent(logits: np.ndarray, labels: np.ndarray,
                 bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Residual ``softmax(logits + bias) - onehot(labels)`` and per-row cross-entropy."""
    bias = np.zeros(logits.shape[1], dtype=logits.dtype) if bias is None else bias
    resid = np.empty(logits.shape, dtype=logits.dtype)
    loss = np.empty(logits.shape[0], dtype=np.float64)
    softmax_xent_rows(logits, labels, bias, resid, loss)
    return resid, loss
