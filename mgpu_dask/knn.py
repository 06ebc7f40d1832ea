"""``KNeighborsClassifier``: brute-force KNN over dask arrays, on GPUs or CPUs.

Block work is done by our kernels (``mgpu_dask.kernels.knn``: cuBLAS products
on tensor cores and Numba CUDA kernels around them), the Dask graphs by
``mgpu_dask.knn_plans``.  The estimator uses the active ``distributed`` client
when there is one and never creates or stores one.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from . import config, inputs, placement
from . import knn_plans as plans
from .data.shard import detect_device
from .exceptions import DataError
from .inputs import NotFittedError, accuracy, to_host
from .kernels import knn_precision as precisions
from .kernels.knn import MAX_K

__all__ = ["KNeighborsClassifier", "NotFittedError", "accuracy", "to_host"]


def _worker_budget(client: Any, device: str) -> int:
    """Bytes one worker may use for the training set and scratch (80% of the smallest)."""
    if client is None:
        import psutil

        return int(0.8 * psutil.virtual_memory().available)
    if device == "gpu":
        def free_device_memory() -> int:
            import cupy

            return int(cupy.cuda.runtime.memGetInfo()[0])

        return int(0.8 * min(client.run(free_device_memory).values()))
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    import psutil

    return int(0.8 * min((x for x in limits if x), default=psutil.virtual_memory().total))


def _capability(client: Any, device: str) -> tuple[int, int] | None:
    """The smallest compute capability of the workers' GPUs; None on CPU."""
    if device != "gpu":
        return None

    def capability() -> tuple[int, int]:
        import cupy

        cc = str(cupy.cuda.Device().compute_capability)
        return int(cc[:-1]), int(cc[-1])

    if client is None:
        return capability()
    return min(client.run(capability).values())


def _block_stats(block: Any) -> Any:
    low, high, integral = precisions.eight_bit_stats(inputs.as_numpy(block))
    return np.array([[low, high, float(integral)]])


def _eight_bit(X: Any) -> precisions.EightBit:
    """Whether the training rows are 8-bit integers (by dtype, else by their values)."""
    if X.dtype in (np.uint8, np.int8):
        return precisions.eight_bit_of(X.dtype)
    if not isinstance(X, da.Array):
        return precisions.eight_bit_of(X.dtype, *precisions.eight_bit_stats(np.asarray(X)))
    stats = to_host(placement.map_blocks(inputs.active_client(), _block_stats, X,
                                         name=placement.fresh_name("knn-range"),
                                         chunks=((1,) * X.numblocks[0], (3,)),
                                         meta=np.empty((0, 0))))
    return precisions.eight_bit_of(X.dtype, float(stats[:, 0].min()), float(stats[:, 1].max()),
                                   bool(stats[:, 2].all()))


def _bytes_per_value(precision: str, eight_bit: bool, method: str) -> int:
    """Bytes a worker keeps per training value (operand plus exact rows where needed)."""
    if method == "direct":
        return 4
    operand = {"int8": 1, "bf16": 2}.get(precision, 4)
    extra = 4 if precision == "bf16" and not eight_bit else 0
    return operand + extra


class KNeighborsClassifier:
    """k-nearest-neighbour classifier on dask arrays of CuPy or NumPy chunks.

    Parameters
    ----------
    n_neighbors : int, default 3
        Neighbours per query, 1 to 64.
    weights : {"distance", "uniform"}, default "distance"
        ``"distance"`` weighs each neighbour by 1/d; a query with exact
        matches (d = 0) is decided by those alone, as in scikit-learn.
    plan : {"auto", "replicate", "shard"}, default "auto"
        ``"replicate"`` copies the training set to every worker and shards the
        queries; ``"shard"`` splits the training set and tree-merges each
        worker's top-k.  ``"auto"`` replicates when the training set fits the
        per-worker memory budget.
    precision : {"auto", "int8", "bf16", "tf32", "fp32"}, default "auto"
        Arithmetic of the distance product (``mgpu_dask.kernels.knn_precision``).
        8-bit integer data (uint8 pixels) are exact in every precision, so
        ``"auto"`` takes the fastest tensor cores for them (``"bf16"``;
        ``"int8"`` on a GPU older than Ampere); other data take ``"tf32"``
        (``"fp32"`` on a CPU or an older GPU), and every precision's
        ranking is re-ranked in float64 and certified by an error bound, rows
        it cannot certify recomputed: the neighbours are exact in every
        precision.  ``"int8"`` on other data is an error; a GPU without the
        tensor cores a precision needs runs ``"fp32"`` (``precision_note_``).
    method : {"gemm", "direct"}, default "gemm"
        Bulk distances by a cuBLAS / BLAS product in ``precision``, or by our
        tiled Numba difference kernel in float32.
    margin : int, default 8
        Extra candidates re-ranked with exact float64 distances where keys are
        approximate.
    memory_budget : int, str or None, default None
        Bytes of training data one worker may hold (``"20GB"``); ``None`` reads
        80% of the smallest worker's free GPU / host memory.  A training set
        above it is sharded; one that does not fit even sharded is an error.
    tile_bytes : int, str or None, default None
        Largest product tile; ``None`` is twice the GPU's L2 cache (8 MiB on a
        CPU), so each tile is ranked while it is still largely in cache.

    Attributes
    ----------
    classes_ : numpy.ndarray
        Class labels seen in ``fit``.
    n_features_in_ : int
        Features per row seen in ``fit``.
    n_samples_fit_ : int
        Training rows.
    plan_ : str
        The plan chosen in ``fit``.
    precision_ : str
        The precision the product runs in.
    precision_note_ : str or None
        Why ``precision_`` differs from the one asked for.
    exact_keys_ : bool
        The product gives exact keys (8-bit data): no re-ranking is needed.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> X = da.from_array(np.array([[0.0, 0], [1, 1], [9, 9], [10, 10]]), chunks=2)
    >>> y = da.from_array(np.array([0, 0, 1, 1]), chunks=2)
    >>> clf = KNeighborsClassifier(n_neighbors=1).fit(X, y)
    >>> clf.predict(da.from_array(np.array([[0.2, 0.1], [8.0, 9.0]]))).compute()
    array([0, 1])
    """

    def __init__(self, n_neighbors: int = 3, *, weights: str = "distance", plan: str = "auto",
                 precision: str = "auto", method: str = "gemm", margin: int = 8,
                 memory_budget: int | str | None = None,
                 tile_bytes: int | str | None = None) -> None:
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.plan = plan
        self.precision = precision
        self.method = method
        self.margin = margin
        self.memory_budget = memory_budget
        self.tile_bytes = tile_bytes

    # -- validation ---------------------------------------------------------------------------
    def _check_params(self, n_rows: int) -> None:
        k = self.n_neighbors
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise DataError(f"n_neighbors={k!r} must be a positive integer (e.g. 3)")
        if k > n_rows:
            raise DataError(f"n_neighbors={k} is larger than the {n_rows} training rows; "
                            f"use at most {n_rows}")
        if k > MAX_K:
            raise DataError(f"n_neighbors={k} exceeds the kernels' limit of {MAX_K}")
        for name, value, allowed in (("weights", self.weights, ("distance", "uniform")),
                                     ("plan", self.plan, ("auto", "replicate", "shard")),
                                     ("precision", self.precision, precisions.PRECISIONS),
                                     ("method", self.method, ("gemm", "direct"))):
            if value not in allowed:
                raise DataError(f"{name}={value!r} must be one of {', '.join(allowed)}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "layout_"):
            raise NotFittedError("this KNeighborsClassifier is not fitted yet; call fit(X, y) "
                                 "before predict, predict_proba, kneighbors or score")

    def _as_queries(self, X: Any) -> da.Array:
        self._check_fitted()
        X = X if isinstance(X, da.Array) else da.from_array(np.asarray(X), chunks=(-1, -1))
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise DataError(f"X has {X.shape[-1] if X.ndim else 0} features per row but the "
                            f"model was fitted with {self.n_features_in_}")
        return X.rechunk({1: -1}) if X.numblocks[1] > 1 else X

    # -- estimator API ------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "KNeighborsClassifier":
        """Store the training set on the workers (replicated or sharded).

        Parameters
        ----------
        X : dask.array.Array or numpy.ndarray of shape (n_samples, n_features)
        y : dask.array.Array or numpy.ndarray of shape (n_samples,)
            Integer class labels.

        Returns
        -------
        self
        """
        if getattr(X, "ndim", 0) != 2:
            raise DataError(f"X must be 2-D (rows x features), got shape {getattr(X, 'shape', None)}")
        if getattr(y, "ndim", 0) != 1 or y.shape[0] != X.shape[0]:
            raise DataError(f"y must be 1-D with one label per row of X ({X.shape[0]}), "
                            f"got shape {getattr(y, 'shape', None)}")
        self._check_params(int(X.shape[0]))
        client = inputs.active_client()
        timeout = config.seconds("cluster.compute-timeout")
        labels = to_host(y)
        if not inputs.all_finite(X):
            raise DataError("the training rows contain NaN or infinity; clean or impute them first")
        if not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"y must hold integer class labels, got dtype {labels.dtype}")
        self.classes_ = np.unique(labels)
        encoded = np.searchsorted(self.classes_, labels).astype(np.int32)
        contiguous = np.array_equal(self.classes_, np.arange(len(self.classes_)))
        self._classes_out = None if contiguous else self.classes_
        if isinstance(X, da.Array):
            device = inputs.device_of(X)
        else:
            device = detect_device(client) if client is not None else "cpu"
        eight = _eight_bit(X)
        try:
            precision, note = precisions.choose(self.precision, eight.exact,
                                                _capability(client, device))
        except ValueError as exc:
            raise DataError(str(exc)) from None
        if self.method == "direct":
            precision = "fp32"
        prep = plans.Prep(precision, eight.exact, eight.shift, self.method)
        plan = self.plan
        train_bytes = int(X.shape[0]) * int(X.shape[1]) * _bytes_per_value(
            precision, eight.exact, self.method)
        budget = parse_bytes(self.memory_budget) if self.memory_budget else None
        self.memory_budget_ = budget
        if plan == "auto":
            budget = budget or _worker_budget(client, device)
            self.memory_budget_ = budget
            plan = "replicate" if train_bytes <= budget else "shard"
        if plan == "shard" and self.memory_budget:
            n_workers = len(client.scheduler_info(n_workers=-1)["workers"]) if client else 1
            if train_bytes / n_workers > budget:
                raise DataError(
                    f"the training set ({train_bytes / 2**30:.2f} GiB in {precision}) does not "
                    f"fit {n_workers} worker(s) x {budget / 2**30:.2f} GiB memory budget even "
                    "when sharded; add workers (GPUs), raise --memory-budget or use a smaller "
                    "--fraction")
        build = plans.replicate_train if plan == "replicate" else plans.shard_train
        self.layout_ = build(X, encoded, client, device, timeout, prep)
        self.plan_ = plan
        self.precision_ = precision
        self.precision_note_ = note
        self.exact_keys_ = precisions.is_exact(precision, eight.exact, self.method)
        self.n_features_in_ = int(X.shape[1])
        self.n_samples_fit_ = int(X.shape[0])
        return self

    def _candidates(self, X: Any, n_neighbors: int | None = None,
                    vote: tuple | None = None) -> da.Array:
        Q = self._as_queries(X)
        k = n_neighbors or self.n_neighbors
        if not 1 <= k <= self.n_samples_fit_:
            raise DataError(f"n_neighbors={k} must be between 1 and {self.n_samples_fit_}")
        tile = parse_bytes(self.tile_bytes) if self.tile_bytes is not None else None
        return plans.candidates(Q, self.layout_, k, margin=self.margin, tile_bytes=tile,
                                client=inputs.active_client(),
                                timeout=config.seconds("cluster.compute-timeout"), vote=vote)

    def kneighbors(self, X: Any, n_neighbors: int | None = None,
                   return_distance: bool = True) -> Any:
        """Distances (euclidean) and training-row indices of each row's neighbours, nearest first."""
        cand = self._candidates(X, n_neighbors)
        indices = cand[..., 1].astype(np.int64)
        if not return_distance:
            return indices
        return da.sqrt(cand[..., 0]), indices

    def predict_from_candidates(self, cand: da.Array) -> da.Array:
        """Vote on candidates from :meth:`kneighbors_candidates` (the CLI times the two apart)."""
        return plans.vote_predictions(inputs.active_client(), cand, len(self.classes_), self.weights,
                                      self._classes_out, self.layout_.device)

    def kneighbors_candidates(self, X: Any) -> da.Array:
        """Packed ``(m, k, 3)`` candidates: squared distance, training index, encoded label."""
        return self._candidates(X)

    def predict(self, X: Any, *, on_host: bool = False) -> da.Array:
        """Predicted class label per row.

        With a distributed client the work starts at once, one task per query
        block on the worker holding it, and the result is a persisted dask
        array; without one it is lazy.

        Parameters
        ----------
        X : dask.array.Array or numpy.ndarray of shape (n_queries, n_features)
        on_host : bool, default False
            Return NumPy chunks even from GPU workers (copied there, in the same task).
        """
        self._check_fitted()
        vote = (len(self.classes_), self.weights, self._classes_out, on_host)
        return self._candidates(X, vote=vote)

    def predict_proba(self, X: Any) -> da.Array:
        """Class probabilities per row, columns ordered as ``classes_``."""
        return plans.vote_probabilities(inputs.active_client(), self._candidates(X), len(self.classes_),
                                        self.weights, self.layout_.device)

    def score(self, X: Any, y: Any) -> float:
        """Mean accuracy on ``(X, y)``."""
        return accuracy(self.predict(X), y)
