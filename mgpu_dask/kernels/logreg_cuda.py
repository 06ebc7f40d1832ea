"""Numba CUDA kernel for multinomial logistic regression.

``softmax_xent_rows``: per row of ``X @ W`` plus the intercept (added here, so
no separate launch), in one pass: the log-sum-exp, the cross-entropy of the
true class, and the residual softmax - onehot (which becomes the gradient
after one product with X^T).  One thread per row.
"""

from __future__ import annotations

import math

from numba import cuda, float64


@cuda.jit(cache=True)
def softmax_xent_rows(logits, labels, bias, resid, loss):
    row = cuda.grid(1)
    if row >= logits.shape[0]:
        return
    n_classes = logits.shape[1]
    top = logits[row, 0] + bias[0]
    for c in range(1, n_classes):
        top = max(top, logits[row, c] + bias[c])
    total = float64(0.0)
    for c in range(n_classes):
        total += math.exp(float64(logits[row, c] + bias[c] - top))
    lse = float64(top) + math.log(total)
    target = labels[row]
    loss[row] = lse - float64(logits[row, target] + bias[target])
    for c in range(n_classes):
        p = math.exp(float64(logits[row, c] + bias[c]) - lse)
        resid[row, c] = p - (1.0 if c == target else 0.0)
