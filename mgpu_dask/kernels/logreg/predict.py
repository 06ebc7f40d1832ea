"""The most probable class of each row of a block, in one Numba CUDA kernel.

``argmax(X @ coef + intercept)`` per row without the float32 copy of the rows,
the logits or a kernel per step: a warp per row reads the row once (uint8
pixels as they are), each lane sums its features' products with every
class's coefficients in float64, the warp adds its lanes' sums in shared
memory, and one lane writes the index of the largest logit (the first, on a
tie, as NumPy's ``argmax``).  No warp shuffles: it also runs in the CUDA
simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64, int32

from ..launch import launch, on_gpu

MAX_CLASSES = 32
"""Classes at most (each lane keeps one sum per class); more take the caller's path."""
ROWS_PER_BLOCK = 4  # warps per block, one row each
LANES = 32
DTYPES = (np.uint8, np.float32, np.float64)
"""Row dtypes the kernel reads as they are."""


@cuda.jit(cache=True)
def argmax_rows(X, coef, intercept, out):
    """``out[i] = argmax_c (X[i] . coef[:, c] + intercept[c])`` for every row ``i``."""
    warp = cuda.threadIdx.x // LANES
    lane = cuda.threadIdx.x % LANES
    row = cuda.blockIdx.x * ROWS_PER_BLOCK + warp
    n, d = X.shape[0], X.shape[1]
    k = coef.shape[1]
    sums = cuda.shared.array((ROWS_PER_BLOCK, LANES, MAX_CLASSES), float64)
    acc = cuda.local.array(MAX_CLASSES, float64)
    for c in range(k):
        acc[c] = 0.0
    if row < n:
        for j in range(lane, d, LANES):
            x = float64(X[row, j])
            if x != 0.0:  # pixels are mostly zeros
                for c in range(k):
                    acc[c] += x * float64(coef[j, c])
    for c in range(k):
        sums[warp, lane, c] = acc[c]
    cuda.syncthreads()
    if row < n and lane < k:  # lane c adds class c's sums (its own column only)
        total = float64(intercept[lane])
        for q in range(LANES):
            total += sums[warp, q, lane]
        sums[warp, 0, lane] = total
    cuda.syncthreads()
    if row < n and lane == 0:
        best = int32(0)
        top = sums[warp, 0, 0]
        for c in range(1, k):
            if sums[warp, 0, c] > top:
                top = sums[warp, 0, c]
                best = c
        out[row] = best


def usable(X: Any, coef: np.ndarray) -> bool:
    """Whether :func:`class_indices` takes these rows and coefficients: a C-contiguous
    2-d CuPy block of one of :data:`DTYPES`, ``coef`` d x k with k at most
    :data:`MAX_CLASSES`."""
    return (on_gpu(X) and X.ndim == 2 and X.flags.c_contiguous
            and np.dtype(X.dtype) in [np.dtype(t) for t in DTYPES]
            and np.ndim(coef) == 2 and np.shape(coef)[0] == X.shape[1]
            and 1 <= np.shape(coef)[1] <= MAX_CLASSES)


def class_indices(X: Any, coef: np.ndarray, intercept: np.ndarray) -> Any:
    """The index of the largest logit of each row of the CuPy rows ``X`` (int32, on X's
    GPU, queued on the current stream); ``coef`` (d x k) and ``intercept`` (k) travel
    as float32, as the float32 product's would.  See :func:`usable`."""
    import cupy

    with X.device:
        w = cupy.asarray(np.ascontiguousarray(coef, dtype=np.float32))
        b = cupy.asarray(np.ascontiguousarray(intercept, dtype=np.float32))
        out = cupy.empty(X.shape[0], dtype=np.int32)
        if X.shape[0]:
            launch(argmax_rows, -(-X.shape[0] // ROWS_PER_BLOCK), ROWS_PER_BLOCK * LANES,
                   X, w, b, out)
    return out
