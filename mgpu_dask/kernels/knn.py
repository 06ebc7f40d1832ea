"""Launch helpers for the KNN kernels: arrays in, arrays out, GPU or CPU.

The target follows the input (CuPy array: CUDA kernels; NumPy array: Numba
CPU kernels) unless ``target="cuda"`` forces the CUDA kernels, which is how
tests run them on NumPy arrays under the CUDA simulator.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._launch import array_module, on_gpu, thread_grid

INT_MAX = 2**31 - 1
MAX_K = 64


def _cuda_target(x: Any, target: str | None) -> bool:
    if target not in (None, "cuda", "cpu"):
        raise ValueError(f"target={target!r} must be None, 'cuda' or 'cpu'")
    return target == "cuda" or (target is None and on_gpu(x))


def sqdist(Q: Any, T: Any, *, target: str | None = None) -> Any:
    """Squared euclidean distances ``(m, n)`` by our tiled kernel (float32)."""
    xp = array_module(Q)
    out = xp.empty((Q.shape[0], T.shape[0]), dtype=np.float32)
    if _cuda_target(Q, target):
        from . import knn_cuda

        grid = (max(1, math.ceil(T.shape[0] / knn_cuda.TILE)),
                max(1, math.ceil(Q.shape[0] / knn_cuda.TILE)))
        knn_cuda.sqdist_tiled[grid, (16, 16)](Q, T, out)
    else:
        from . import knn_cpu

        knn_cpu.sqdist_direct(Q, T, out)
    return out


def topk(D: Any, k: int, *, alpha: float = 1.0, beta: Any = None,
         target: str | None = None) -> tuple[Any, Any]:
    """The k smallest ``alpha * D + beta`` per row: values (float32) and columns (int32)."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k={k} must be between 1 and {MAX_K}")
    xp = array_module(D)
    if beta is None:
        beta = xp.zeros(D.shape[1], dtype=np.float32)
    values = xp.empty((D.shape[0], k), dtype=np.float32)
    columns = xp.empty((D.shape[0], k), dtype=np.int32)
    if _cuda_target(D, target):
        from . import knn_cuda

        knn_cuda.topk_rows[max(1, D.shape[0]), knn_cuda.ROW_THREADS](D, np.float32(alpha), beta, k, values, columns)
    else:
        from . import knn_cpu

        knn_cpu.topk_rows(D, np.float32(alpha), beta, k, values, columns)
    return values, columns


def refine(Q: Any, T: Any, candidates: Any, k: int, *,
           target: str | None = None) -> tuple[Any, Any]:
    """Exact float64 squared distances of candidate columns; the k best per row."""
    xp = array_module(Q)
    sq = xp.empty((Q.shape[0], k), dtype=np.float64)
    columns = xp.empty((Q.shape[0], k), dtype=np.int32)
    if _cuda_target(Q, target):
        from . import knn_cuda

        knn_cuda.refine_rows[max(1, Q.shape[0]), knn_cuda.ROW_THREADS](Q, T, candidates, k, sq, columns)
    else:
        from . import knn_cpu

        knn_cpu.refine_rows(Q, T, candidates, k, sq, columns)
    return sq, columns


def _pack(xp: Any, sq: Any, columns: Any, labels: Any, index: Any) -> Any:
    """Candidates as float64 ``(m, k, 3)``: squared distance, training index, label."""
    valid = columns != INT_MAX
    safe = xp.where(valid, columns, 0)
    out = xp.empty(columns.shape + (3,), dtype=np.float64)
    out[..., 0] = xp.where(valid, sq, np.inf)
    out[..., 1] = xp.where(valid, index[safe], -1)
    out[..., 2] = xp.where(valid, labels[safe], 0)
    return out


def local_candidates(Q: Any, T: Any, labels: Any, index: Any, k: int, *, method: str = "gemm",
                     margin: int = 8, block_bytes: int = 1 << 30, norms: Any = None,
                     target: str | None = None) -> Any:
    """The k nearest training rows of every query row, as packed candidates.

    Parameters
    ----------
    Q : array of shape (m, d)
        Query rows (float32).
    T : array of shape (n, d)
        Training rows (float32) held by this worker.
    labels : array of shape (n,)
        Their labels.
    index : array of shape (n,)
        Their global row numbers (int64), reported in the candidates.
    k : int
        Neighbours per query.
    method : {"gemm", "direct"}, default "gemm"
        ``"gemm"`` ranks by ``|t|^2 - 2 q.t`` from a BLAS / cuBLAS product, then
        recomputes the best ``k + margin`` exactly; ``"direct"`` uses our tiled
        difference kernel (exact for 8-bit data) and refines likewise.
    margin : int, default 8
        Extra candidates re-ranked exactly (0 skips the refinement).
    block_bytes : int, default 1 GiB
        Largest score matrix built at once; queries are processed in slices.
    norms : array of shape (n,), optional
        ``(T * T).sum(1)`` in float32 for ``"gemm"``, when precomputed.
    target : {None, "cuda", "cpu"}
        Kernel family; ``None`` follows the array type.

    Returns
    -------
    array of shape (m, k, 3), float64
        ``[squared distance, global index, label]``, nearest first; missing
        neighbours (fewer than k rows here) are ``[inf, -1, 0]``.
    """
    if method not in ("gemm", "direct"):
        raise ValueError(f"method={method!r} must be 'gemm' or 'direct'")
    xp = array_module(Q)
    n = T.shape[0]
    k_rank = min(k + margin, MAX_K) if margin > 0 else k
    out = xp.empty((Q.shape[0], k, 3), dtype=np.float64)
    if n == 0:
        out[..., 0], out[..., 1], out[..., 2] = np.inf, -1, 0
        return out
    rows_per_block = max(1, block_bytes // (4 * n))
    if method == "gemm" and norms is None:
        norms = row_norms(T)
    for start in range(0, Q.shape[0], rows_per_block):
        Qb = Q[start:start + rows_per_block]
        if method == "gemm":
            scores = xp.matmul(Qb, T.T)
            values, columns = topk(scores, min(k_rank, n), alpha=-2.0, beta=norms, target=target)
        else:
            scores = sqdist(Qb, T, target=target)
            values, columns = topk(scores, min(k_rank, n), target=target)
        del scores
        if margin > 0 or method == "gemm":
            sq, columns = refine(Qb, T, columns, min(k, n), target=target)
        else:
            sq = values.astype(np.float64)
        if sq.shape[1] < k:  # fewer training rows here than k: pad with "no neighbour"
            pad = k - sq.shape[1]
            sq = xp.concatenate([sq, xp.full((sq.shape[0], pad), np.inf)], axis=1)
            columns = xp.concatenate([columns, xp.full((sq.shape[0], pad), INT_MAX,
                                                       dtype=np.int32)], axis=1)
        out[start:start + Qb.shape[0]] = _pack(xp, sq, columns, labels, index)
    return out


def row_norms(T: Any) -> Any:
    """Squared euclidean norm of each row, float32."""
    return (T * T).sum(axis=1, dtype=np.float32)


def merge(a: Any, b: Any, *, target: str | None = None) -> Any:
    """Merge two packed candidate sets for the same queries into the k best."""
    xp = array_module(a)
    out = xp.empty_like(a)
    if _cuda_target(a, target):
        from . import knn_cuda

        knn_cuda.merge_pairs[thread_grid(a.shape[0])](a, b, out)
    else:
        from . import knn_cpu

        knn_cpu.merge_pairs(a, b, out)
    return out


def vote(candidates: Any, n_classes: int, weights: str = "distance", *,
         target: str | None = None) -> tuple[Any, Any]:
    """Class probabilities ``(m, n_classes)`` and predictions ``(m,)`` from candidates."""
    if weights not in ("distance", "uniform"):
        raise ValueError(f"weights={weights!r} must be 'distance' or 'uniform'")
    xp = array_module(candidates)
    proba = xp.empty((candidates.shape[0], n_classes), dtype=np.float64)
    pred = xp.empty(candidates.shape[0], dtype=np.int32)
    uniform = weights == "uniform"
    if _cuda_target(candidates, target):
        from . import knn_cuda

        knn_cuda.vote_rows[thread_grid(candidates.shape[0])](candidates, n_classes, uniform,
                                                             proba, pred)
    else:
        from . import knn_cpu

        knn_cpu.vote_rows(candidates, n_classes, uniform, proba, pred)
    return proba, pred
