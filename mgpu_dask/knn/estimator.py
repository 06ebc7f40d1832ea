"""``KNeighborsClassifier``: brute-force KNN over dask arrays, on GPUs or CPUs.

Block work is done by our kernels (:mod:`mgpu_dask.kernels.knn`: cuBLAS
products on tensor cores and Numba CUDA kernels around them), the training
rows are placed by :mod:`.layout` as :mod:`.choices` decides, and the searches
are the Dask graphs of :mod:`.plans`.  The estimator uses the active
``distributed`` client when there is one and never creates or stores one.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.utils import parse_bytes
from sklearn.base import BaseEstimator, ClassifierMixin

from .. import config
from ..exceptions import DataError, MgpuDaskError
from ..kernels.knn import MAX_K, floats
from ..kernels.knn import precision as precisions
from ..kernels.precision import Precision
from ..parallel import inputs
from ..parallel.inputs import NotFittedError, accuracy, to_host
from ..parallel.workers import detect_device, one_view
from . import choices, convert, layout, plans

__all__ = ["KNeighborsClassifier", "NotFittedError", "accuracy", "to_host"]


class KNeighborsClassifier(ClassifierMixin, BaseEstimator):
    """k-nearest-neighbour classifier on dask arrays of CuPy or NumPy chunks.

    A scikit-learn estimator (``clone``, ``Pipeline``, ``GridSearchCV``): the
    answers come back in the type that came in (NumPy in, NumPy out; CuPy in,
    CuPy out; a dask array in, a dask array out, computed where its blocks
    live), for labels of any type scikit-learn accepts.  A fitted model
    pickles with its training rows brought home (while its cluster runs) and
    places them again on first use; :meth:`to_sklearn` and
    :meth:`from_sklearn` convert to and from scikit-learn's brute-force
    ``KNeighborsClassifier``.

    Parameters
    ----------
    n_neighbors : int, default 3
        Neighbours per query, 1 to 64.
    weights : {"distance", "uniform"}, default "distance"
        ``"distance"`` weighs each neighbour by 1/d (d in ``metric``); a query with
        exact matches (d = 0) is decided by those alone, as in scikit-learn.
        ``metric="inner_product"`` has no distance: it takes ``"uniform"``.
    metric : {"euclidean", "sqeuclidean", "cosine", "inner_product"}, default "euclidean"
        How neighbours are ranked, and the distances :meth:`kneighbors` returns:
        scikit-learn's metrics of those names (``cosine``: ``1 - cos``), and
        ``inner_product`` (largest ``q.t`` first, as FAISS's ``IndexFlatIP``; the
        "distances" returned are the inner products).  Every metric is exact: see
        ``precision``.
    plan : {"auto", "replicate", "shard"}, default "auto"
        ``"replicate"`` copies the training set to every worker and shards the
        queries; ``"shard"`` splits the training set and tree-merges each
        shard's top-k (workers that share a GPU hold one shard between them, so
        the GPU searches its rows once).  ``"auto"`` replicates when the training set fits the
        per-worker memory budget, except rows already persisted on the
        workers above ``mgpu-dask.knn.replicate-max-move`` (2 GiB): those stay
        where they are, sharded.
    precision : {"auto", "int8", "bf16", "fp16", "tf32", "fp32"}, default "auto"
        Arithmetic of the distance product (``mgpu_dask.kernels.knn.precision``).
        8-bit integer data (uint8 pixels) under a distance are exact in every
        precision, so ``"auto"`` takes int8 tensor cores for them (from Ampere on,
        one kernel that folds the products straight into each row's top-k,
        ``mgpu_dask.kernels.knn.fused``).  Other data take ``"fp16"`` on a GPU: the
        rows centred and scaled, float16 tensor cores, and for the rows that product
        cannot settle a three-part float16 product near float32's
        (``mgpu_dask.kernels.knn.floats``); ``"fp32"`` on a CPU.  Every precision's
        candidates are re-ranked exactly and certified by a proven error bound, and
        the rows it cannot certify are searched again more exactly, in float64 last:
        the neighbours are those of an exact brute force in every precision.
        ``"int8"`` on other data is an error; a GPU without the tensor cores a
        precision needs runs ``"fp32"`` (``precision_note_``).
    method : {"gemm", "direct"}, default "gemm"
        Bulk distances by a cuBLAS / BLAS product in ``precision``, or by our
        tiled Numba difference kernel in float32.
    margin : int or None, default None
        Extra candidates re-ranked with exact float64 distances where keys are
        approximate (more make certification likelier; correctness never rests on it).
        None picks the list from the data's shape: 8 extra below 256 features,
        64 candidates in all from 256 features or 2**28 training values a worker on.
    memory_budget : int, str or None, default None
        Bytes of training data one worker may hold (``"20GB"``); ``None`` reads
        80% of the smallest worker's free GPU / host memory.  A training set
        above it is sharded; one that does not fit even sharded is an error.
    tile_bytes : int, str or None, default None
        Largest product tile; ``None`` is eight times the GPU's L2 cache (8 MiB
        on a CPU), never more than an eighth of the device's free memory: big
        enough for efficient products, each tile ranked as soon as it is made.
        Query blocks are searched in passes whose buffers take at most a quarter of
        the free memory (eight tiles where this is given), so a block of any size
        searches in bounded memory.

    Attributes
    ----------
    classes_ : numpy.ndarray
        Class labels seen in ``fit``.
    n_features_in_ : int
        Features per row seen in ``fit``.
    feature_names_in_ : numpy.ndarray
        Column names, when ``fit`` was given a DataFrame with string column names.
    n_samples_fit_ : int
        Training rows.
    plan_ : str
        The plan chosen in ``fit``.
    layout_ : mgpu_dask.knn.layout.TrainLayout
        The placed training rows: which worker holds which prepared block.  It is
        what the search graphs of :mod:`mgpu_dask.knn.plans` take (the CLI times
        the search and the vote apart with them).
    precision_ : Precision
        The precision the product runs in (a ``str`` enum: ``"bf16"``, ...).
    precision_note_ : str or None
        Why ``precision_`` differs from the one asked for.
    memory_budget_ : int or None
        Bytes per worker the plan was chosen against (None: not needed).
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
    >>> clf.predict(np.array([[9.5, 9.0]]))  # NumPy in, NumPy out
    array([1])
    """

    def __init__(self, n_neighbors: int = 3, *, weights: str = "distance",
                 metric: str = "euclidean", plan: str = "auto",
                 precision: str = "auto", method: str = "gemm", margin: int | None = None,
                 memory_budget: int | str | None = None,
                 tile_bytes: int | str | None = None) -> None:
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
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
            raise DataError(f"n_neighbors={k} is larger than n_samples = {n_rows} (the training "
                            f"rows); use at most {n_rows}")
        if k > MAX_K:
            raise DataError(f"n_neighbors={k} exceeds the kernels' limit of {MAX_K}")
        for name, value, allowed in (("weights", self.weights, ("distance", "uniform")),
                                     ("metric", self.metric, floats.METRICS),
                                     ("plan", self.plan, ("auto", "replicate", "shard")),
                                     ("precision", self.precision, precisions.PRECISIONS),
                                     ("method", self.method, ("gemm", "direct"))):
            if value not in allowed:
                raise DataError(f"{name}={value!r} must be one of {', '.join(allowed)}")
        if self.metric == "inner_product" and self.weights == "distance":
            raise DataError("weights='distance' weighs by 1/distance, and metric="
                            "'inner_product' has no distance; use weights='uniform'")
        if floats.inner(self.metric) and self.method == "direct":
            raise DataError(f"method='direct' computes distances; metric={self.metric!r} "
                            "takes method='gemm'")
        if self.margin is not None and (not isinstance(self.margin, (int, np.integer))
                                        or isinstance(self.margin, bool) or self.margin < 0):
            raise DataError(f"margin={self.margin!r} must be None (chosen from the data's "
                            "shape) or a non-negative integer (e.g. 8)")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("this KNeighborsClassifier is not fitted yet; call fit(X, y) "
                                 "before predict, predict_proba, kneighbors or score")

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "classes_")

    def _as_queries(self, X: Any) -> da.Array:
        """Checked queries as a dask array (NumPy and CuPy inputs: one block)."""
        self._check_fitted()
        X = inputs.predict_inputs(self, X)
        if not isinstance(X, da.Array):
            if inputs.kind_of(X) == "cupy" and inputs.active_client() is not None:
                X = X.get()  # travels in the graph to the GPU workers, like NumPy queries
            X = da.from_array(X, chunks=(-1, -1), name=False)  # no hash of the rows
        return X.rechunk({1: -1}) if X.numblocks[1] > 1 else X

    @property
    def _host_classes(self) -> bool:
        """Labels GPU arrays cannot hold (strings): predictions are codes, mapped on the host."""
        return not inputs.numeric_classes(self.classes_)

    @property
    def _classes_out(self) -> np.ndarray | None:
        """Labels the workers map codes to; None where the codes are the labels themselves."""
        if self._host_classes or np.array_equal(self.classes_, np.arange(len(self.classes_))):
            return None
        return self.classes_

    def _returned(self, result: da.Array, like: Any, codes: bool = False) -> Any:
        return inputs.returned_like(result, like, self.classes_ if codes else None)

    # -- estimator API ------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "KNeighborsClassifier":
        """Store the training set on the workers (replicated or sharded).

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels of any type scikit-learn accepts (integers, strings, ...).

        Returns
        -------
        self
        """
        X, labels = inputs.fit_inputs(self, X, y)
        if isinstance(X, da.Array) and X.numblocks[1] > 1:  # a row's features in one block
            X = X.rechunk({1: -1})
        self._check_params(int(X.shape[0]))
        self.classes_, encoded = inputs.encode_labels(labels)
        self._train_source = X
        self._train_codes = encoded
        self.n_samples_fit_ = int(X.shape[0])
        with one_view(inputs.active_client()):  # one question for the workers' list
            self._place()
        return self

    def _place(self) -> None:
        """Put the training rows on the workers (or prepare them here without a client)."""
        X, encoded = self._train_source, self._train_codes
        client = inputs.active_client()
        if isinstance(X, da.Array):
            device = inputs.device_of(X)
            if device == "cpu" and client is not None and detect_device(client) == "gpu":
                device = "gpu"  # NumPy chunks: each goes to the GPU of the worker holding it
        elif inputs.kind_of(X) == "cupy":
            device = "gpu"
            if client is not None:
                X = X.get()  # shipped to the workers as NumPy rows, made CuPy there
        else:
            device = detect_device(client) if client is not None else "cpu"
        choice = choices.choose(X, client, device, plan=self.plan, precision=self.precision,
                                method=self.method, memory_budget=self.memory_budget,
                                metric=self.metric)
        eight = choice.eight_bit
        choices.announce(X, choice, device, self, client)
        prep = layout.Prep(choice.precision, eight.exact, eight.shift, self.method, self.metric,
                           split=choice.precision is Precision.FP16)
        build = layout.replicate_train if choice.plan == "replicate" else layout.shard_train
        self.layout_ = build(X, encoded, client, device, config.seconds("cluster.compute-timeout"),
                             prep)
        self.plan_ = choice.plan
        self.precision_ = choice.precision
        self.precision_note_ = choice.precision_note
        self.memory_budget_ = choice.memory_budget
        self.exact_keys_ = precisions.is_exact(choice.precision, eight.exact, self.method)

    def _layout(self) -> layout.TrainLayout:
        """The placed training rows; placed now if this model was unpickled or converted."""
        if getattr(self, "layout_", None) is None:
            self._place()
        return self.layout_

    def _candidates(self, X: Any, n_neighbors: int | None = None,
                    vote: tuple | None = None) -> da.Array:
        Q = self._as_queries(X)
        k = n_neighbors or self.n_neighbors
        if not 1 <= k <= self.n_samples_fit_:
            raise DataError(f"n_neighbors={k} must be between 1 and n_samples = "
                            f"{self.n_samples_fit_}")
        tile = parse_bytes(self.tile_bytes) if self.tile_bytes is not None else None
        return plans.candidates(Q, self._layout(), k, margin=self.margin, tile_bytes=tile,
                                client=inputs.active_client(),
                                timeout=config.seconds("cluster.compute-timeout"), vote=vote)

    def kneighbors(self, X: Any = None, n_neighbors: int | None = None,
                   return_distance: bool = True) -> Any:
        """Distances and training-row indices of each row's neighbours, nearest first.

        As scikit-learn's ``NearestNeighbors.kneighbors``: the distances are those of
        scikit-learn's metric of the same name (``inner_product``: the inner products,
        largest first), exact whatever the product's precision.

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_queries, n_features)
            The query rows (``None`` is not supported: pass the training rows).
        n_neighbors : int or None, default None
            Neighbours per row (``None``: ``n_neighbors`` of the model).
        return_distance : bool, default True
            Whether to return the distances too.

        Returns
        -------
        distances : array of shape (n_queries, n_neighbors), float64
            Only with ``return_distance``.
        indices : array of shape (n_queries, n_neighbors), int64
            Rows of the training set, in the type of ``X`` (see the class notes).
        """
        if X is None:
            raise DataError("kneighbors(X=None) would exclude each training row from its own "
                            "neighbours, which is not supported; pass the rows")
        cand = self._candidates(X, n_neighbors)
        indices = self._returned(cand[..., 1].astype(np.int64), X)
        if not return_distance:
            return indices
        dist = -cand[..., 0] if self.metric == "inner_product" else cand[..., 0]
        return self._returned(dist, X), indices

    def predict(self, X: Any, *, on_host: bool = False) -> Any:
        """Predicted class label per row, in the type of ``X``.

        For a dask array with a distributed client the work starts at once,
        one task per query block on the worker holding it, and the result is
        a persisted dask array; without a client it is lazy.  NumPy (or any
        array-like) queries give a NumPy array, CuPy queries a CuPy array
        (NumPy where the labels are strings).

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_queries, n_features)
        on_host : bool, default False
            For dask queries: NumPy chunks even from GPU workers (copied there, in the same task).
        """
        self._check_fitted()
        vote = (len(self.classes_), self.weights, self._classes_out, on_host)
        return self._returned(self._candidates(X, vote=vote), X, codes=self._host_classes)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities per row, columns ordered as ``classes_``, in the type of ``X``."""
        cand = self._candidates(X)
        proba = plans.vote_probabilities(inputs.active_client(), cand, len(self.classes_),
                                         self.weights, self._layout().device)
        return self._returned(proba, X)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy on ``(X, y)`` (weighted by ``sample_weight`` when given)."""
        pred = self.predict(X, on_host=True)  # NumPy blocks: one Dask stage for dask rows
        if sample_weight is None:
            return accuracy(pred, y)
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(to_host(y), to_host(pred), sample_weight=sample_weight))

    # -- models that travel -------------------------------------------------------------------
    def _rows_home(self) -> np.ndarray:
        """The training rows as a NumPy array (gathered from the workers for a dask input)."""
        X = self._train_source
        if isinstance(X, da.Array):
            from distributed import futures_of

            held = futures_of(X)
            if held and any(f.client.status != "running" for f in held):
                raise MgpuDaskError(
                    "this KNeighborsClassifier's training rows live on a cluster that has "
                    "closed; pickle or convert the model while its cluster runs (the rows "
                    "then come home), or fit it again")
            return to_host(X)
        return inputs.as_numpy(X)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if "_train_source" in state:  # fitted: rows home, placed again on first use
            state["_train_source"] = self._rows_home()
            state["layout_"] = None
        return state

    def to_sklearn(self) -> Any:
        """The equivalent fitted ``sklearn.neighbors.KNeighborsClassifier`` (brute force,
        the same metric; ``inner_product`` has none there).

        Its training rows come home from the workers (see :meth:`__getstate__`).
        """
        self._check_fitted()
        return convert.to_sklearn(self)

    @classmethod
    def from_sklearn(cls, model: Any, **params: Any) -> "KNeighborsClassifier":
        """Ours from a fitted scikit-learn ``KNeighborsClassifier`` with the euclidean,
        squared euclidean or cosine metric.

        The rows are placed on the active client's workers (or prepared here)
        on first use.  ``params`` set our other parameters (``precision``, ``plan``, ...).
        """
        return convert.from_sklearn(cls, model, params)
