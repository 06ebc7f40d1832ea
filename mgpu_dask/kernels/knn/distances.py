"""Squared distances by our own kernels: the tiled difference kernel and the exact
float64 re-rank of candidate columns.

The target follows the input (CuPy array: CUDA kernels; NumPy array: Numba
CPU kernels) unless ``target="cuda"`` forces the CUDA kernels, which is how
tests run them on NumPy arrays under the CUDA simulator.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..launch import array_module, launch, on_gpu

INT_MAX = 2**31 - 1
"""The column of a candidate slot that holds no neighbour."""
MAX_K = 64
"""The longest candidate list a query row keeps (neighbours plus the re-rank's margin)."""


def _cuda_target(x: Any, target: str | None) -> bool:
    if target not in (None, "cuda", "cpu"):
        raise ValueError(f"target={target!r} must be None, 'cuda' or 'cpu'")
    return target == "cuda" or (target is None and on_gpu(x))


def sqdist(Q: Any, T: Any, *, target: str | None = None, out: Any = None) -> Any:
    """Squared euclidean distances ``(m, n)`` by our tiled kernel (float32), into ``out``
    (a C-contiguous float32 array) where given."""
    xp = array_module(Q)
    if out is None:
        out = xp.empty((Q.shape[0], T.shape[0]), dtype=np.float32)
    if _cuda_target(Q, target):
        from . import cuda as cuda_kernels

        grid = (max(1, math.ceil(T.shape[0] / cuda_kernels.TILE)),
                max(1, math.ceil(Q.shape[0] / cuda_kernels.TILE)))
        launch(cuda_kernels.sqdist_tiled, grid, (16, 16), Q, T, out)
    else:
        from . import cpu as cpu_kernels

        cpu_kernels.sqdist_direct(Q, T, out)
    return out


def refine(Q: Any, T: Any, candidates: Any, k: int, *, target: str | None = None,
           inner: bool = False) -> tuple[Any, Any]:
    """Exact float64 squared distances of candidate columns (``inner``: ``-2 q.t``);
    the k best per row, ties to the smaller column."""
    xp = array_module(Q)
    sq = xp.empty((Q.shape[0], k), dtype=np.float64)
    columns = xp.empty((Q.shape[0], k), dtype=np.int32)
    if _cuda_target(Q, target):
        from . import cuda as cuda_kernels

        from . import cuda_rows

        if Q.shape[1] <= cuda_rows.SHORT_ROWS and candidates.shape[1] <= MAX_K:
            launch(cuda_rows.refine_rows_short, max(1, Q.shape[0]), cuda_rows.REFINE_THREADS, Q,
                   T, candidates, k, int(inner), sq, columns)
        else:
            launch(cuda_kernels.refine_rows, max(1, Q.shape[0]), cuda_kernels.ROW_THREADS, Q, T,
                   candidates, k, int(inner), sq, columns)
    else:
        from . import cpu as cpu_kernels

        cpu_kernels.refine_rows(Q, T, candidates, k, int(inner), sq, columns)
    return sq, columns
