"""Our KNN and logistic regression as CUDA C kernels (CuPy ``RawModule``), the seed
study's "CuPy with custom CUDA C kernels", on the same dask shards as ours.

Same placement as the CuPy row (the training set prepared once per worker,
one task per query block on its GPU, :mod:`..on_shards`) and the same
algorithms as our Numba kernels (:mod:`.kernels`): the table compares the
frameworks.  For KNN that is our tile loop (a product per tile, then the scan);
on 8-bit data ours now runs one fused int8 kernel instead (``kernels/knn/fused``).
Logistic regression evaluates each shard with the CUDA C softmax between two
cuBLAS products, driven by our host L-BFGS like the CuPy row.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...kernels.knn import prepare_queries, prepare_train
from ...kernels.knn.precision import choose, eight_bit_of, eight_bit_stats
from ...kernels.knn.product import TileProduct
from ...kernels.launch import array_module, as_numpy, on_gpu
from ...kernels.precision import Precision
from ...parallel.workers import gpu_capability
from ..backend import BackendRun, BackendSkipped, converted_note
from ..cupy import fit_logreg, knn_on_copies
from . import kernels as cuda_c


def prepare_rows(copy: tuple[Any, Any], exact: bool, shift: int) -> tuple[Any, Any]:
    """A worker's training copy from its rows on the device: our prepared block
    (:func:`kernels.knn.prepare_train`) and the class indices.  8-bit data (``exact``,
    integers ``shift`` away from int8): the tile loop's fastest exact product on this GPU,
    bf16 tensor cores where there are some (cuBLAS's int8 products are slower at these
    shapes; ours runs int8 only fused with the top-k, which these kernels do not copy),
    else what ours would choose; other data: fp32 products (NumPy rows on a CPU worker:
    our operands emulated, for tests)."""
    X, y = copy
    capability = gpu_capability() if on_gpu(X) else None
    asked = Precision.AUTO if exact else Precision.FP32
    if exact and capability is not None and capability >= Precision.BF16.needs:
        asked = Precision.BF16
    precision, _ = choose(asked, exact, capability)
    return prepare_train(X, precision, exact, shift), y


def _cuda_c_block(Qb: Any, copy: tuple, k: int, weights: str, n_classes: int) -> np.ndarray:
    """One query block against this worker's prepared training copy, by the CUDA C kernels.

    The products are our cuBLAS calls (:class:`~mgpu_dask.kernels.knn.TileProduct`, in
    the precision the copy was prepared in), everything after them the CUDA C kernels.
    """
    train, yb = copy
    xp = array_module(train.norms)
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
    return as_numpy(cuda_c.vote(sq, rows, yb, n_classes, weights))


def knn(run: BackendRun) -> dict[str, Any]:
    X = run.parts.X_train
    host = isinstance(X, np.ndarray)  # rows generated on the workers: knn_on_copies declines
    if host and run.options["k"] > cuda_c.MAX_K:
        raise BackendSkipped(f"the CUDA C kernels keep at most {cuda_c.MAX_K} neighbours per row")
    eight = eight_bit_of(X.dtype, *eight_bit_stats(X)) if host else eight_bit_of(np.float32)
    prepare = functools.partial(prepare_rows, exact=eight.exact, shift=eight.shift)
    out = knn_on_copies(run, prepare, _cuda_c_block, "the CUDA C KNN")
    return {**out, "note": None if eight.exact else converted_note(run)}


def logreg(run: BackendRun) -> dict[str, Any]:
    return fit_logreg(run, cuda_c.loss_grad)
