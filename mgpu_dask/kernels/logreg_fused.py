"""The fused strategy of :class:`mgpu_dask.kernels.logreg.ShardObjective`: our
own two passes over X (row pass, column pass, block sums), no cuBLAS.

Exact but not fast: 0.58 ms per MNIST-sized evaluation on an H200 against
cuBLAS's 0.24 ms (``benchmarks/NOTES-logreg.md``, fourth round).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._launch import array_module, bound_launch, launch


def fits(d: int, k: int) -> bool:
    """Whether our two-pass kernels take this shape (else cuBLAS products and one kernel)."""
    from . import logreg_cuda as C

    return k <= C.MAX_K and d * k <= C.MAX_W and d <= C.MAX_D


def loss_grad(X: Any, labels: Any, coef: Any, intercept: Any, *, row_blocks: int = 2,
              col_blocks: int = 3) -> tuple[float, Any, Any]:
    """Our two-pass kernels once (the CUDA simulator runs them on NumPy arrays).

    Returns ``(loss, grad_coef (d x k, float32), grad_intercept (k,))``, unscaled sums.
    """
    from . import logreg_cuda as C

    xp = array_module(X)
    n, d = X.shape
    k = len(intercept)
    params = xp.concatenate([xp.asarray(coef, dtype=np.float32).ravel(),
                             xp.asarray(intercept, dtype=np.float32)])
    resid = xp.empty((n, k), dtype=np.float32)
    bpart = xp.empty((row_blocks, k + 1), dtype=np.float64)
    partial = xp.empty((col_blocks, d * k), dtype=np.float32)
    grad = xp.empty(d * k, dtype=np.float32)
    sums = xp.empty(k + 1, dtype=np.float64)
    launch(C.row_pass, row_blocks, C.ROW_WARPS * 32, X, labels, params, resid, bpart)
    launch(C.col_pass, col_blocks, -(-d // 32) * 32, X, resid, partial)
    launch(C.sum_blocks, -(-(d * k + k + 1) // C.SUM_LANES), 2 * C.SUM_LANES, partial, bpart,
           grad, sums)
    return float(sums[k]), grad.reshape(d, k), sums[:k]


def ops(obj: Any, n: int, d: int) -> list:
    """Row pass, column pass, block sums: X read twice at full width, no cuBLAS."""
    import cupy

    from . import logreg_cuda as C

    if not fits(d, obj.k):
        raise ValueError(f"method='fused' takes at most {C.MAX_K} classes, "
                         f"{C.MAX_W} coefficients and {C.MAX_D} features")
    k = obj.k
    sms = obj.device.attributes["MultiProcessorCount"]
    row_blocks = max(1, min(-(-n // C.ROW_WARPS), 5 * sms))  # 5 blocks of 45 KiB per SM
    col_blocks = max(1, min(-(-n // C.COL_CHUNK), 2 * sms))
    obj.bpart = cupy.empty((row_blocks, k + 1), dtype=np.float64)
    obj.partial = cupy.empty((col_blocks, d * k), dtype=np.float32)
    return [
        bound_launch(C.row_pass, [obj.X, obj.labels, obj.params, obj.resid, obj.bpart],
                     (row_blocks,), C.ROW_WARPS * 32, obj.stream),
        bound_launch(C.col_pass, [obj.X, obj.resid, obj.partial], (col_blocks,),
                     -(-d // 32) * 32, obj.stream),
        bound_launch(C.sum_blocks, [obj.partial, obj.bpart, obj.grad.reshape(-1),
                                    obj.sums], (-(-(d * k + k + 1) // C.SUM_LANES),),
                     C.SUM_LANES * C.SUM_LANES, obj.stream)]
