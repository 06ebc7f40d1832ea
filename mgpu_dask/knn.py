"""``KNeighborsClassifier``: brute-force KNN over dask arrays, on GPUs or CPUs.

Block work is done by our Numba kernels (``mgpu_dask.kernels.knn``), the Dask
graphs by ``mgpu_dask.knn_plans``.  The estimator uses the active
``distributed`` client when there is one and never creates or stores one.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from . import config, placement
from . import knn_plans as plans
from .data.shard import detect_device
from .exceptions import DataError, MgpuDaskError
from .kernels._launch import array_module, on_gpu
from .kernels.knn import MAX_K


class NotFittedError(MgpuDaskError, AttributeError):
    """``predict`` or ``kneighbors`` was called before ``fit``."""


def _active_client() -> Any:
    """The current distributed client, or None (no client, or only a closed one)."""
    try:
        from distributed import get_client

        client = get_client()
    except ValueError:
        return None
    return client if client.status == "running" else None


def _device_of(array: Any) -> str:
    meta = getattr(array, "_meta", array)
    return "gpu" if type(meta).__module__.startswith("cupy") else "cpu"


def _block_finite(block: Any) -> Any:
    xp = array_module(block)
    return xp.isfinite(block).all().reshape(1)


def _all_finite(X: Any) -> bool:
    """No NaN or infinity in X; host arrays are checked here, dask arrays where they live."""
    if np.issubdtype(X.dtype, np.integer):
        return True
    if isinstance(X, da.Array):
        flags = placement.map_blocks(_active_client(), _block_finite, X,
                                     name=placement.fresh_name("finite"),
                                     chunks=((1,) * X.numblocks[0],), meta=np.empty(0, bool))
        return bool(to_host(flags).all())
    return bool(np.isfinite(X).all())


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
    method : {"gemm", "direct"}, default "gemm"
        Bulk distances by a BLAS / cuBLAS product (then exact re-ranking), or
        by our tiled Numba difference kernel.
    margin : int, default 8
        Extra candidates re-ranked with exact float64 distances.
    memory_budget : int, str or None, default None
        Bytes of training data one worker may hold (``"20GB"``); ``None`` reads
        80% of the smallest worker's free GPU / host memory.  A training set
        above it is sharded; one that does not fit even sharded is an error.
    block_bytes : int or str, default "1GiB"
        Largest distance matrix a worker builds at once.

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
                 method: str = "gemm", margin: int = 8, memory_budget: int | str | None = None,
                 block_bytes: int | str = "1GiB") -> None:
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.plan = plan
        self.method = method
        self.margin = margin
        self.memory_budget = memory_budget
        self.block_bytes = block_bytes

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
        client = _active_client()
        timeout = config.seconds("cluster.compute-timeout")
        labels = to_host(y)
        if not _all_finite(X):
            raise DataError("the training rows contain NaN or infinity; clean or impute them first")
        if not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"y must hold integer class labels, got dtype {labels.dtype}")
        self.classes_ = np.unique(labels)
        encoded = np.searchsorted(self.classes_, labels).astype(np.int32)
        contiguous = np.array_equal(self.classes_, np.arange(len(self.classes_)))
        self._classes_out = None if contiguous else self.classes_
        if isinstance(X, da.Array):
            device = _device_of(X)
        else:
            device = detect_device(client) if client is not None else "cpu"
        plan = self.plan
        train_bytes = int(X.shape[0]) * int(X.shape[1]) * 4
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
                    f"the training set ({train_bytes / 2**30:.2f} GiB as float32) does not fit "
                    f"{n_workers} worker(s) x {budget / 2**30:.2f} GiB memory budget even when "
                    "sharded; add workers (GPUs), raise --memory-budget or use a smaller --fraction")
        build = plans.replicate_train if plan == "replicate" else plans.shard_train
        self.layout_ = build(X, encoded, client, device, timeout)
        self.plan_ = plan
        self.n_features_in_ = int(X.shape[1])
        self.n_samples_fit_ = int(X.shape[0])
        return self

    def _candidates(self, X: Any, n_neighbors: int | None = None,
                    vote: tuple | None = None) -> da.Array:
        Q = self._as_queries(X)
        k = n_neighbors or self.n_neighbors
        if not 1 <= k <= self.n_samples_fit_:
            raise DataError(f"n_neighbors={k} must be between 1 and {self.n_samples_fit_}")
        return plans.candidates(Q, self.layout_, k, method=self.method, margin=self.margin,
                                block_bytes=parse_bytes(self.block_bytes), client=_active_client(),
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
        return plans.vote_predictions(_active_client(), cand, len(self.classes_), self.weights,
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
        return plans.vote_probabilities(_active_client(), self._candidates(X), len(self.classes_),
                                        self.weights, self.layout_.device)

    def score(self, X: Any, y: Any) -> float:
        """Mean accuracy on ``(X, y)``."""
        return accuracy(self.predict(X), y)


def _asnumpy(block: Any) -> np.ndarray:
    return block.get() if hasattr(block, "get") else np.asarray(block)


def to_host(array: Any, timeout: float | None = None) -> np.ndarray:
    """A NumPy copy of a dask, CuPy or NumPy array, within ``timeout`` seconds.

    Dask arrays of CuPy chunks are copied to host memory on their workers, so
    the client never needs a CUDA context to receive them.  ``timeout``
    defaults to ``mgpu-dask.cluster.compute-timeout``; past it, TimeoutError.
    """
    if isinstance(array, da.Array):
        client = _active_client()
        if client is not None:
            from distributed import wait

            timeout = timeout or config.seconds("cluster.compute-timeout")
            if array.ndim > 1 and array.numblocks[1:] != (1,) * (array.ndim - 1):
                array = array.rechunk({i: -1 for i in range(1, array.ndim)})
            placed = placement.row_futures(array)
            if _device_of(array) == "gpu" and all(f is not None for f in placed):
                # Copied to the host where each block lives.
                array = placement.map_blocks(client, _asnumpy, array,
                                             name=placement.fresh_name("to-host"),
                                             chunks=array.chunks,
                                             meta=np.empty((0,) * array.ndim, array.dtype))
                placed = placement.row_futures(array)
            elif _device_of(array) == "gpu":
                array = array.map_blocks(_asnumpy, meta=np.empty((0,) * array.ndim, array.dtype))
            if all(f is not None for f in placed):
                blocks = placed
            else:  # a lazy array: its row blocks, gathered directly (no concatenating task)
                blocks = client.compute(list(array.to_delayed().ravel()), optimize_graph=False)
            try:
                wait(blocks, timeout=timeout)
            except TimeoutError:
                client.cancel(blocks)
                raise TimeoutError(f"results did not arrive within {timeout:.0f} s") from None
            # Blocks of an array with a wrong _meta (cuML's KNN predict) may still be CuPy.
            parts = [p.get() if on_gpu(p) else p for p in client.gather(blocks)]
            return np.concatenate(parts, axis=0) if array.ndim else np.asarray(parts[0])
        array = array.compute()
    return array.get() if hasattr(array, "get") else np.asarray(array)


def accuracy(pred: Any, y: Any) -> float:
    """Share of equal entries, for any mix of dask, CuPy and NumPy arrays."""
    pred, y = to_host(pred), to_host(y)
    if pred.shape != y.shape:
        raise DataError(f"{len(y)} labels for {len(pred)} predictions")
    return float((pred == y).mean())
