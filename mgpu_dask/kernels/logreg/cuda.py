"""Numba CUDA kernel of the float32 evaluation of multinomial logistic regression, and
the row cross-entropy the tensor-core evaluations share (:mod:`.cuda_bf16`,
:mod:`.cuda_int8`).

``softmax_xent_rows``: one thread per row of ``logits = X @ W``: adds the
intercept, then in one pass the log-sum-exp, the cross-entropy of the true
class and the residual ``softmax - onehot`` (which becomes the coefficient
gradient after one cuBLAS product with ``X^T``).  Each block also sums its
rows' residuals (the intercept gradient) and cross-entropies (the loss) in
shared memory and adds them to ``acc`` with one atomic per class, so a whole
evaluation needs no other kernel.  No warp shuffles: it also runs in the
CUDA simulator.
"""

from __future__ import annotations

import math

from numba import cuda, float64

from ..blocks import block_sum
from ..jitable import inlined_device

THREADS = 128  # threads per block, one row each (the shared reduction is sized by it)


def _row_xent(logit):
    """A device function ``(logits, row, k, info, target) -> (lse, loss)``: one row's
    log-sum-exp and cross-entropy in float64, where logit ``c`` of the row is
    ``logit(logits, row, c, k, info)`` (the split evaluations' logits come from terms)."""

    @inlined_device
    def row_xent(logits, row, k, info, target):
        top = logit(logits, row, 0, k, info)
        for c in range(1, k):
            top = max(top, logit(logits, row, c, k, info))
        total = float64(0.0)
        for c in range(k):
            total += math.exp(logit(logits, row, c, k, info) - top)
        lse = top + math.log(total)
        return lse, lse - logit(logits, row, target, k, info)

    return row_xent


@cuda.jit(cache=True)
def softmax_xent_rows(logits, labels, bias, weights, weighted, resid, acc):
    """``acc[c] += sum of resid[:, c]`` (c < k) and ``acc[k] += summed cross-entropy``;
    with ``weighted`` each row's residual and cross-entropy times ``weights[row]``."""
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x * THREADS + tid
    n, k = logits.shape[0], logits.shape[1]
    loss = float64(0.0)
    if row < n:
        w = float64(weights[row]) if weighted != 0 else 1.0
        top = logits[row, 0] + bias[0]
        for c in range(1, k):
            top = max(top, logits[row, c] + bias[c])
        total = float64(0.0)
        for c in range(k):
            total += math.exp(float64(logits[row, c] + bias[c] - top))
        lse = float64(top) + math.log(total)
        target = labels[row]
        loss = w * (lse - float64(logits[row, target] + bias[target]))
        for c in range(k):
            p = math.exp(float64(logits[row, c] + bias[c]) - lse)
            resid[row, c] = w * (p - (1.0 if c == target else 0.0))
    partial = cuda.shared.array(THREADS, float64)
    for c in range(k + 1):  # block sums: each class's residual, then the loss
        value = loss
        if c < k:
            value = float64(resid[row, c]) if row < n else 0.0
        summed = block_sum(value, partial)
        if tid == 0:
            cuda.atomic.add(acc, c, summed)
