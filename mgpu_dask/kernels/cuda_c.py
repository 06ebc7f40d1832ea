"""Our KNN and logistic-regression kernels in CUDA C, compiled by NVRTC through CuPy's
``RawModule`` (the ``cuda-c`` comparison backend).

The sources sit beside this module (``knn_c.cu``, ``logreg_c.cu``) and hold the
algorithms of the Numba kernels (``knn_cuda.py``, ``logreg_cuda.py``), so a
table row compares the frameworks, not the algorithms: cuBLAS products
through CuPy, then

* KNN: per tile of training rows one product and ``scan_topk`` (each query
  row's running top ``k + REFINE_MARGIN`` by ``|t|^2 - 2 q.t``), then
  ``refine_rows`` (exact float64 distances, ``k`` best, ties to the smaller
  index) and ``vote_rows``;
* logistic regression: ``X W``, ``softmax_xent`` (residuals, the intercept's
  gradient and the loss in float64), ``X^T R``.

Each process compiles a source once per GPU, at its first use.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np

SOURCES = {"knn": "knn_c.cu", "logreg": "logreg_c.cu"}
KERNELS = {"knn": ("scan_topk", "refine_rows", "vote_rows"), "logreg": ("softmax_xent",)}
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


def candidates(Q: Any, T: Any, norms: Any, n: int, K: int, tile_bytes: int = 1 << 29) -> Any:
    """``(m, K)`` int32 training rows with the smallest ``norms - 2 Q T^T`` per query row
    (ascending, ties to the smaller row), over training rows ``[0, n)``.

    ``Q`` (m, D) and ``T`` (>= n, D) float32 CuPy arrays of the same width;
    the products go in tiles of training rows whose output stays under
    ``tile_bytes``.
    """
    import cupy

    if not 1 <= K <= MAX_K:
        raise ValueError(f"the CUDA C kernels keep 1 to {MAX_K} candidates per row, not {K}")
    m = int(Q.shape[0])
    keys = cupy.full((m, K), np.inf, dtype=np.float32)
    cols = cupy.full((m, K), NO_COLUMN, dtype=np.int32)
    if m == 0 or n == 0:
        return cols
    step = min(n, max(32, tile_bytes // (4 * m) // 32 * 32))
    buffer = cupy.empty(m * step, dtype=np.float32)
    scan = function("knn", "scan_topk")
    grid, block = _warp_grid(m)
    for c0 in range(0, n, step):
        width = min(step, n - c0)
        G = buffer[:m * width].reshape(m, width)
        cupy.matmul(Q, T[c0:c0 + width].T, out=G)
        scan(grid, block, (G, np.int64(width), np.int32(m), np.int32(width), norms,
                           np.int32(c0), keys, cols, np.int32(K)))
    return cols


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
