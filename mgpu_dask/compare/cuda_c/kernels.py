"""Our KNN and logistic-regression kernels in CUDA C, compiled by NVRTC through CuPy's
``RawModule`` (the ``cuda-c`` comparison backend).

The sources sit beside this module (``knn.cu``, ``logreg.cu``) and hold the
algorithms of our Numba kernels (:mod:`mgpu_dask.kernels.knn.cuda`,
:mod:`mgpu_dask.kernels.logreg.cuda`), so a table row compares the
frameworks, not the algorithms: cuBLAS products through CuPy, then

* KNN: per tile of training rows one product (our operands and cuBLAS call,
  :class:`mgpu_dask.kernels.knn.TileProduct`: bf16 or int8 tensor cores for 8-bit data)
  and ``scan_topk`` (each query row's running top-K by ``|t|^2 - 2 q.t`` in
  float64), then -- where keys are not exact, data that are not 8-bit --
  ``refine_rows`` over ``k + REFINE_MARGIN`` candidates (exact float64
  distances, ``k`` best, ties to the smaller index), and ``vote_rows``;
* logistic regression: ``X W``, ``softmax_xent`` (residuals, the intercept's
  gradient and the loss in float64), ``X^T R``.

Each process compiles a source once per GPU, at its first use.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np

SOURCES = {"knn": "knn.cu", "logreg": "logreg.cu"}
KERNELS = {"knn": ("scan_topk", "scan_topk_i32", "refine_rows", "vote_rows"),
           "logreg": ("softmax_xent",)}
MAX_K = 32           # a row's candidate list lives in one warp, one entry per lane
REFINE_MARGIN = 8    # candidates kept beyond k for the exact re-rank, as in our Numba path
NO_COLUMN = 2**31 - 1
ROWS_PER_BLOCK = 8   # warps per block of the warp-per-row kernels
THREADS = 256
OPTIONS = ("--std=c++17",)  # NVRTC options besides the architecture, which CuPy adds

_modules: dict[tuple[str, int], Any] = {}


def source(name: str) -> str:
    """The CUDA C source of ``"knn"`` or ``"logreg"``."""
    return resources.files(__package__).joinpath(SOURCES[name]).read_text()


def function(name: str, kernel: str) -> Any:
    """Kernel ``kernel`` of source ``name``, compiled for the current GPU on first use."""
    import cupy

    key = (name, cupy.cuda.Device().id)
    module = _modules.get(key)
    if module is None:
        module = _modules[key] = cupy.RawModule(code=source(name), options=OPTIONS)
    return module.get_function(kernel)


def _warp_grid(rows: int) -> tuple[tuple[int], tuple[int]]:
    return (-(-rows // ROWS_PER_BLOCK),), (32 * ROWS_PER_BLOCK,)


def scan(G: Any, ld: int, m: int, width: int, norms: Any, col0: int, keys: Any,
         cols: Any) -> None:
    """Fold one tile of products ``G`` (m rows of ``width``, row stride ``ld``; float32,
    or int32 from int8 products) into each row's running lists ``keys`` (float64) and
    ``cols`` (int32), both (m, K) sorted ascending, ties to the smaller row."""
    kernel = function("knn", "scan_topk_i32" if G.dtype == np.int32 else "scan_topk")
    grid, block = _warp_grid(m)
    kernel(grid, block, (G, np.int64(ld), np.int32(m), np.int32(width), norms, np.int32(col0),
                         keys, cols, np.int32(keys.shape[1])))


def candidates_by(product: Any, m: int, n: int, norms: Any, K: int, step: int) -> tuple[Any, Any]:
    """``(keys (m, K) float64, cols (m, K) int32)``: each query row's smallest
    ``norms - 2 q.t`` over training rows ``[0, n)``, ascending, ties to the smaller row.

    ``product(col0, width)`` returns a buffer whose first ``m * width`` entries are
    the products of the m query rows with training rows ``[col0, col0 + width)``
    (row-major); it is called for tiles of ``step`` training rows.
    """
    from ...kernels.launch import array_module

    if not 1 <= K <= MAX_K:
        raise ValueError(f"the CUDA C kernels keep 1 to {MAX_K} candidates per row, not {K}")
    xp = array_module(norms)
    keys = xp.full((m, K), np.inf, dtype=np.float64)
    cols = xp.full((m, K), NO_COLUMN, dtype=np.int32)
    for c0 in range(0, n if m else 0, step):
        width = min(step, n - c0)
        scan(product(c0, width), width, m, width, norms, c0, keys, cols)
    return keys, cols


def tile_step(m: int, n: int, tile_bytes: int = 1 << 29) -> int:
    """Training rows per product tile: the tile's (m x step) output under ``tile_bytes``."""
    return max(1, min(n, max(32, tile_bytes // (4 * max(1, m)) // 32 * 32)))


def candidates(Q: Any, T: Any, norms: Any, n: int, K: int, tile_bytes: int = 1 << 29) -> tuple:
    """:func:`candidates_by` with float32 products ``Q T^T`` by ``cupy.matmul``.

    ``Q`` (m, D) and ``T`` (>= n, D) float32 CuPy arrays of the same width.
    """
    import cupy

    m = int(Q.shape[0])
    step = tile_step(m, n, tile_bytes)
    buffer = cupy.empty(m * step, dtype=np.float32)

    def product(c0: int, width: int) -> Any:
        cupy.matmul(Q, T[c0:c0 + width].T, out=buffer[:m * width].reshape(m, width))
        return buffer

    return candidates_by(product, m, n, norms, K, step)


def refine(Q: Any, T: Any, cols: Any, d: int, k: int) -> tuple[Any, Any]:
    """Exact float64 squared distances to each row's candidates; the ``k`` smallest,
    ascending, with their training rows: ``(sq (m, k), rows (m, k))``."""
    import cupy

    m, K = int(cols.shape[0]), int(cols.shape[1])
    sq = cupy.empty((m, k), dtype=np.float64)
    rows = cupy.empty((m, k), dtype=np.int32)
    if m:
        grid, block = _warp_grid(m)
        function("knn", "refine_rows")(grid, block, (
            Q, np.int64(Q.shape[1]), T, np.int64(T.shape[1]), np.int32(m), np.int32(d), cols,
            np.int32(K), np.int32(k), sq, rows))
    return sq, rows


def vote(sq: Any, rows: Any, labels: Any, n_classes: int, weights: str) -> Any:
    """Class index per query row from its neighbours (uniform or 1/d weights)."""
    import cupy

    m, k = int(sq.shape[0]), int(sq.shape[1])
    out = cupy.empty(m, dtype=np.int32)
    if m:
        function("knn", "vote_rows")((-(-m // THREADS),), (THREADS,), (
            sq, rows, np.int32(m), np.int32(k), cupy.asarray(labels, dtype=np.int32),
            np.int32(n_classes), np.int32(weights == "uniform"), out))
    return out


def loss_grad(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray) -> tuple:
    """Summed cross-entropy and gradient of one shard on its GPU:
    ``(loss, grad_coef (d, k) float64, grad_intercept (k,) float64)``."""
    import cupy

    X = cupy.asarray(X, dtype=np.float32)
    n, k = int(X.shape[0]), len(intercept)
    if n == 0:
        return 0.0, np.zeros((X.shape[1], k)), np.zeros(k)
    logits = X @ cupy.asarray(coef, dtype=np.float32)
    resid = cupy.empty_like(logits)
    sums = cupy.zeros(k + 1, dtype=np.float64)
    function("logreg", "softmax_xent")(
        (-(-n // THREADS),), (THREADS,),
        (logits, cupy.asarray(intercept, dtype=np.float32), cupy.asarray(labels, dtype=np.int32),
         np.int32(n), np.int32(k), resid, sums), shared_mem=8 * (k + 1))
    grad = X.T @ resid
    host = sums.get()
    return float(host[k]), grad.get().astype(np.float64), host[:k].copy()
