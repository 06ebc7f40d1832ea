"""The bf16 products of :class:`~mgpu_dask.kernels.logreg.objective.ShardObjective`:
both products of an evaluation on bf16 tensor cores, for rows of 8-bit levels.

The levels are exact in bfloat16; the coefficients and residuals go in as
``cuda_bf16.TERMS`` bf16 terms each (:mod:`.cuda_bf16`); ``X^T R`` is summed
per block of :data:`GRADIENT_ROWS` rows, the blocks added by an SGEMV.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cublas import bound_gemm, bound_row_sum
from ..launch import bound_launch, launch, thread_grid
from .levels import converted_levels, level_step, level_steps

GRADIENT_ROWS = 1024
"""``levels^T R`` is one tensor-core product per block of this many rows, and the
blocks' products are added by an SGEMV.  Tensor cores add in float32 without
rounding to nearest, so a sum along many rows drifts from float64's; over
blocks of this size it stays as close as float32 cuBLAS products, and this
size was the fastest of those that do (docs/performance-history.md)."""


def prepare(obj: Any, n: int, d: int) -> tuple[Any, float] | None:
    """X as bf16 levels and their step (``X = step * levels``), or None where X is not
    8-bit levels or the GPU has no bf16 tensor cores (compute capability < 8.0).

    The levels get zero rows up to a whole number of GRADIENT_ROWS blocks.
    """
    import cupy

    from . import cuda_bf16 as C

    if n == 0 or int(obj.device.compute_capability) < 80:
        return None
    with obj.stream:
        to_levels, step = level_steps(obj.X, obj.scale)
        rows = -(-n // GRADIENT_ROWS) * GRADIENT_ROWS
        levels = cupy.zeros((rows, d), dtype=np.uint16)
        if not converted_levels(obj.device, C.to_levels, obj.X.reshape(-1), to_levels,
                                levels[:n].reshape(-1)):
            return None
    return levels, step


def ops(obj: Any, n: int, d: int, levels: Any, step: float) -> list:
    """Split coefficients, ``levels @ w2`` (bf16 tensor cores), softmax with the residual
    split, ``levels^T @ resid2`` per block of GRADIENT_ROWS rows, the blocks added
    (SGEMV), the terms added and scaled: see :mod:`.cuda_bf16`."""
    import cupy

    from . import cuda_bf16 as C

    k = obj.k
    width = -(-C.TERMS * k // 8) * 8  # terms, zeros: a multiple of 8 columns (tensor cores)
    blocks = levels.shape[0] // GRADIENT_ROWS
    obj.levels = levels
    obj._step = cupy.asarray([step], dtype=np.float64)
    obj.w2 = cupy.zeros((d, width), dtype=np.uint16)
    obj.logits = cupy.empty((n, width), dtype=np.float32)
    obj.resid = cupy.zeros((levels.shape[0], width), dtype=np.uint16)
    obj.grad2 = cupy.empty((blocks, d * width), dtype=np.float32)
    obj.grad2_sum = cupy.empty((d, width), dtype=np.float32)
    obj._ones = cupy.ones(blocks, dtype=np.float32)
    coef_blocks = -(-d * k // 256)
    return [
        bound_launch(C.split_coef, [obj.params, obj._step, obj.w2], (coef_blocks,), 256,
                     obj.stream),
        bound_gemm(obj.logits, levels[:n], obj.w2, obj.stream, operands="bf16"),
        bound_launch(C.softmax_xent_split, [obj.logits, obj.labels, obj.params[d * k:],
                                            obj.resid[:n], obj.sums],
                     (thread_grid(n, C.THREADS)[0],), C.THREADS, obj.stream),
        bound_gemm(obj.grad2.reshape(blocks, d, width), levels, obj.resid, obj.stream,
                   trans_a=True, operands="bf16", batches=blocks),
        bound_row_sum(obj.grad2_sum.reshape(-1), obj.grad2, obj._ones, obj.stream),
        bound_launch(C.combine_split, [obj.grad2_sum, obj._step, obj.grad.reshape(-1)],
                     (coef_blocks,), 256, obj.stream)]


def loss_grad(X: np.ndarray, labels: np.ndarray, coef: np.ndarray,
              intercept: np.ndarray) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The bf16 evaluation once, NumPy products standing in for cuBLAS's (exact products,
    float64 sums) and our kernels in the CUDA simulator: for tests of the kernels' logic.

    Returns ``(loss, grad_coef (d x k), grad_intercept (k,))`` as unscaled
    sums, or None where X is not 8-bit levels.
    """
    from . import cuda_bf16 as C

    n, d = X.shape
    k = len(intercept)
    step = np.array([level_step(X)])
    levels = np.empty(n * d, dtype=np.uint16)
    bad = np.zeros(1, dtype=np.int32)
    launch(C.to_levels, 2, 32, np.ascontiguousarray(X, dtype=np.float32).reshape(-1),
           1.0 / step, levels, bad)
    if bad[0]:
        return None
    width = -(-C.TERMS * k // 8) * 8
    params = np.concatenate([np.asarray(coef, dtype=np.float32).ravel(),
                             np.asarray(intercept, dtype=np.float32)])
    w2 = np.zeros((d, width), dtype=np.uint16)
    launch(C.split_coef, -(-d * k // 32), 32, params, step, w2)

    def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (_values(a) @ _values(b)).astype(np.float32)

    levels = levels.reshape(n, d)
    logits2 = product(levels, w2)
    resid2 = np.zeros((n, width), dtype=np.uint16)
    sums = np.zeros(k + 1, dtype=np.float64)
    launch(C.softmax_xent_split, thread_grid(n, C.THREADS)[0], C.THREADS, logits2,
           np.asarray(labels, dtype=np.int32), params[d * k:], resid2, sums)
    grad = np.empty(d * k, dtype=np.float32)
    g2 = sum(product(levels[r:r + GRADIENT_ROWS].T, resid2[r:r + GRADIENT_ROWS]).astype(np.float64)
             for r in range(0, n, GRADIENT_ROWS)).astype(np.float32)
    launch(C.combine_split, -(-d * k // 32), 32, g2, step, grad)
    return float(sums[k]), grad.reshape(d, k), sums[:k]


def _values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
