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
from ..kernels.knn_products import prepare_queries
from . import BackendRun, BackendSkipped, converted_note, numba_backend
from .cupy_backend import ArrayKNN


def _cuda_c_block(Qb: Any, train: Any, yb: Any, k: int, margin: int, tile_bytes: Any,
                  vote: tuple) -> Any:
    """One query block against this worker's prepared training copy, by the CUDA C kernels
    (``train`` is our ``TrainBlock`` in fp32: padded operand, norms, exact rows if needed)."""
    xp = array_module(train.norms)
    n_classes, weights, classes, host = vote
    m = int(Qb.shape[0])
    queries = prepare_queries(xp.asarray(Qb), train)  # operands padded like ours: m rows used
    K = min(cuda_c.MAX_K, train.n, k + cuda_c.REFINE_MARGIN)
    cols = cuda_c.candidates(queries.operand[:m], train.operand, train.norms, train.n, K)
    Qx = queries.exact if queries.exact is not None else queries.operand[:m]
    Tx = train.rows if train.rows is not None else train.operand
    sq, rows = cuda_c.refine(Qx, Tx, cols, train.d, k)
    pred = cuda_c.vote(sq, rows, yb, n_classes, weights)
    if classes is not None:
        pred = xp.asarray(classes)[pred]
    return as_numpy(pred) if host else pred


class CudaCKNN(ArrayKNN):
    """Our KNN's data placement, the CUDA C kernels' compute."""

    block_fn = staticmethod(_cuda_c_block)


def knn(run: BackendRun) -> dict[str, Any]:
    if not isinstance(run.parts.X_train, np.ndarray):
        raise BackendSkipped("the CUDA C KNN replicates the training set on every worker; "
                             "rows generated on the workers stay where they are")
    if run.options["k"] > cuda_c.MAX_K:
        raise BackendSkipped(f"the CUDA C kernels keep at most {cuda_c.MAX_K} neighbours per row")
    out = numba_backend.knn(
        run, cls=lambda k, weights: CudaCKNN(k, weights=weights, plan="replicate",
                                             precision="fp32"))
    return {**out, "note": converted_note(run)}


def logreg(run: BackendRun) -> dict[str, Any]:
    return numba_backend.logreg(run, loss_grad=cuda_c.loss_grad)
