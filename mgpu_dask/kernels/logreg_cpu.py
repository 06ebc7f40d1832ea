"""Numba CPU kernel for multinomial logistic regression (same contract as the CUDA one)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, nogil=True)
def softmax_xent_rows(logits, labels, resid, loss):
    n_classes = logits.shape[1]
    for row in prange(logits.shape[0]):
        top = logits[row, 0]
        for c in range(1, n_classes):
            top = max(top, logits[row, c])
        total = 0.0
        for c in range(n_classes):
            total += math.exp(np.float64(logits[row, c] - top))
        lse = np.float64(top) + math.log(total)
        target = labels[row]
        loss[row] = lse - np.float64(logits[row, target])
        for c in range(n_classes):
            resid[row, c] = math.exp(np.float64(logits[row, c]) - lse) - (1.0 if c == target else 0.0)
