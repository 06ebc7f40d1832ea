"""Our KNN and logistic regression as CUDA C kernels (CuPy ``RawModule``), the seed
study's "CuPy with custom CUDA C kernels", on the same dask shards as ours.

Same placement as the CuPy row (the training set prepared once per worker,
one task per query block on its GPU) and the same algorithms as our Numba
kernels (``mgpu_dask.kernels.cuda_c``): the table compares the frameworks.
Logistic regression evaluates each shard with the CUDA C softmax between two
cuBLAS products, driven by our host L-BFGS like the CuPy row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..inputs import as_numpy
from ..kernels import cuda_c
from ..kernels._launch import array_module
from ..kernels.knn_precision import eight_bit_of, eight_bit_stats
from ..kernels.knn_products import TileProduct, prepare_queries
from . import BackendRun, BackendSkipped, converted_note, numba_backend
from .cupy_backend import ArrayKNN, replicated_knn


def _cuda_c_block(Qb: Any, train: Any, yb: Any, k: int, margin: int, tile_bytes: Any,
                  vote: tuple) -> Any:
    """One query block against this worker's prepared training copy, by the CUDA C kernels.

    ``train`` is our ``TrainBlock``: the padded operand in the precision ours
    chose (bf16 bits on tensor-core GPUs for 8-bit data), norms, and exact
    rows where keys are not exact.  The products are our cuBLAS calls
    (``TileProduct``), everything after them the CUDA C kernels.
    """
    xp = array_module(train.norms)
    n_classes, weights, classes, host = vote
    m, n = int(Qb.shape[0]), train.n
    queries = prepare_queries(xp.asarray(Qb), train)  # operands padded like ours: m rows used
    exact = train.rows is None  # 8-bit data: every key exact, no re-rank (as ours)
    K = min(cuda_c.MAX_K, n, k if exact else k + cuda_c.REFINE_MARGIN)
    step = cuda_c.tile_step(m, n)
    product = TileProduct(queries.operand, train, m * step)
    keys, cols = cuda_c.candidates_by(lambda c0, width: product(0, m, c0, width), m, n,
                                      train.norms, K, step)
    if exact:
        sq = keys[:, :k] + queries.norms[:, None]
        rows = xp.ascontiguousarray(cols[:, :k])
    else:
        sq, rows = cuda_c.refine(queries.exact, train.rows, cols, train.d, k)
    pred = cuda_c.vote(sq, rows, yb, n_classes, weights)
    if classes is not None:
        pred = xp.asarray(classes)[pred]
    return as_numpy(pred) if host else pred


class CudaCKNN(ArrayKNN):
    """Our KNN's data placement, the CUDA C kernels' compute."""

    block_fn = staticmethod(_cuda_c_block)


def knn(run: BackendRun) -> dict[str, Any]:
    X = run.parts.X_train
    host = isinstance(X, np.ndarray)  # rows generated on the workers: replicated_knn declines
    if host and run.options["k"] > cuda_c.MAX_K:
        raise BackendSkipped(f"the CUDA C kernels keep at most {cuda_c.MAX_K} neighbours per row")
    # 8-bit data: our precision (exact keys on tensor cores); other data: fp32 products and
    # the exact re-rank of k + REFINE_MARGIN candidates
    eight_bit = host and eight_bit_of(X.dtype, *eight_bit_stats(X)).exact
    out = replicated_knn(run, CudaCKNN, "the CUDA C KNN", "auto" if eight_bit else "fp32")
    return {**out, "note": None if eight_bit else converted_note(run)}


def logreg(run: BackendRun) -> dict[str, Any]:
    return numba_backend.logreg(run, loss_grad=cuda_c.loss_grad)
