"""``LogisticRegression``: multinomial, data-parallel L-BFGS on dask arrays.

Each worker's shard stays where it is (on its GPU as CuPy, or in host memory)
and only coefficients, losses and gradients move.  The estimator checks its
inputs, places and labels the rows, and picks a fit route:

* :mod:`.single_host` (default where it applies): one worker maps every shard
  of its host and runs the whole L-BFGS (:mod:`.leader`);
* :mod:`.actors`: the loop on the client, one message round per evaluation
  (any cluster);
* :mod:`.local`: no distributed client (CuPy rows on this GPU, or a small
  graph per evaluation).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from .. import config
from ..data.sharding import meta_for, shard
from ..exceptions import DataError
from ..kernels.precision import Precision
from ..parallel import inputs, placement, spread
from ..parallel import labels as labels_mod
from ..parallel.inputs import NotFittedError, accuracy, device_of
from . import convert, fitted, options, routes, single_host
from .blocks import decision_block, predict_block, proba_block
from .options import COMMS, OPTIMIZERS, PRECISIONS  # noqa: F401  (named here before)
from .problem import Problem

__all__ = ["LogisticRegression", "NotFittedError"]


def _rows_dtype(X: Any) -> np.dtype:
    """How rows live for the fit and predict: uint8 stays 8-bit, the rest float32."""
    return np.dtype(np.uint8) if getattr(X, "dtype", None) == np.uint8 else np.dtype(np.float32)


class LogisticRegression(ClassifierMixin, BaseEstimator):
    """Multinomial logistic regression, fitted on every worker at once.

    Minimises ``mean(cross-entropy) + ((1 - l1_ratio) ||coef||^2 / 2 + l1_ratio
    |coef|_1) / (C n)`` (the intercept is not penalised; with sample or class weights
    the mean and ``n`` are weighted), the objective of scikit-learn's
    ``LogisticRegression(C=C, l1_ratio=l1_ratio)``.

    A scikit-learn estimator (``clone``, ``Pipeline``, ``GridSearchCV``,
    ``cross_val_score``): answers come back in the type that came in (NumPy
    in, NumPy out; CuPy in, CuPy out; a dask array in, a dask array out),
    for labels of any type scikit-learn accepts.  The fitted model is host
    arrays only, so it pickles anywhere; :meth:`to_sklearn` and
    :meth:`from_sklearn` convert to and from scikit-learn's estimator.

    Parameters
    ----------
    C : float, default 1.0
        Inverse regularisation strength; must be > 0; ``np.inf``: no penalty.
    l1_ratio : float, default 0.0
        The L1 share of the penalty: 0 is L2, in (0, 1] an elastic net and at 1 the
        L1 penalty, by OWL-QN (L-BFGS for an L1 part, its zeros exact zeros) in the
        same loop: on the GPU where the L2 fit runs there, else on the host.
    fit_intercept : bool, default True
        ``False``: the intercept stays 0 (its gradient held at zero, on the device too).
    class_weight : dict, "balanced" or None, default None
        Weights per class, multiplied into ``sample_weight`` (scikit-learn's
        ``compute_class_weight``).
    max_iter : int, default 100
        L-BFGS iterations at most.
    tol : float, default 1e-4
        Stop when the largest gradient entry falls below ``tol``.
    solver : {"lbfgs"}, default "lbfgs"
        L-BFGS (OWL-QN with ``l1_ratio > 0``): about one evaluation per iteration.
    classes : array-like or None, default None
        The labels allowed; labels outside them are an error.  ``None`` takes
        the labels seen in ``fit``.
    comm : {"auto", "single-host", "actors"}, default "auto"
        How the optimiser reaches the shards.  ``"single-host"``: one worker
        maps every shard of its host and runs the whole fit (an error where
        the shards span hosts or GPUs it cannot see); ``"actors"``: one message
        round per evaluation, any cluster; ``"auto"``: single-host where
        possible, else actors.
    optimizer : {"auto", "device", "host"}, default "auto"
        Where the L-BFGS vectors live.  ``"device"``: on the GPU that runs
        the fit, shards evaluated and summed device to device, a few scalars
        read by the host per iteration (every shard on a GPU, single-host or
        no client; an error otherwise); ``"host"``: NumPy on the host, one
        gradient download per evaluation; ``"auto"``: the device where it
        can, else the host.

    precision : {"auto", "fp32", "int8", "bf16"}, default "auto"
        The products of each evaluation on a GPU.  ``"fp32"``: float32 products;
        on shards of 16,384 rows or more and up to 128 classes in one pass over the
        rows on the tensor cores, in float32 accuracy (each operand split into two
        tf32 parts, three products of them), else cuBLAS's.  ``"int8"``: int8 tensor
        cores where the rows are 8-bit levels in [0, 255] times one step (integer
        multiples of ``max|X| / 255``, such as pixels / 255) and the GPU has them (compute
        capability 7.5 or newer): X is read at one byte per value, the
        coefficients and residuals go in as four int8 terms each, and the
        int32 sums are exact, so the loss and gradient are closer to float64's
        than float32 products get; during a fit the rows are held twice more as
        int8 (two bytes per value beside the float32 rows).  ``"bf16"``: bf16
        tensor cores for such rows (compute capability 8.0 or newer), half the
        bytes of float32, three bf16 terms, ``X^T R`` summed in short row
        blocks (tensor cores do not round their float32 sums to nearest).
        ``"auto"``: int8 where it applies.  Float32 products wherever the
        chosen one does not apply (``precision_note_`` says why); the CPU path
        is float32 always.  ``precision_`` says which ran.
    input_scale : float or None, default None
        The model sees the rows ``X * input_scale`` in ``fit``, ``predict``
        and ``predict_proba`` (``1 / 255``: pixels in [0, 1]), so uint8 rows
        can stay 8-bit where they live: the int8 and bf16 products take them as
        they are (a quarter of float32's memory, no float32 copy), the other
        paths convert a block at a time.  ``coef_`` belongs to the scaled rows;
        :meth:`to_sklearn` gives the model of the rows as passed.  ``None``:
        the rows as they are.  uint8 rows are kept 8-bit with or without it;
        other rows become float32.

    Attributes
    ----------
    coef_ : numpy.ndarray of shape (n_classes, n_features)
    intercept_ : numpy.ndarray of shape (n_classes,)
    classes_ : numpy.ndarray
    n_iter_ : int
    n_evaluations_ : int
        Objective (loss and gradient) evaluations.
    n_round_trips_ : int
        Dask round trips of the optimisation: 1 for a single-host fit (export
        and fit in one submission; the leader asks the other holders for their
        exports directly), one per evaluation otherwise.
    comm_ : str
        How the fit ran: ``"single-host"``, ``"actors"`` or ``"graph"``.
    optimizer_ : str
        Where the L-BFGS ran: ``"device"`` or ``"host"``.
    comm_note_ : str or None
        Why ``"auto"`` did not run single-host, or how a worker loss was handled.
    precision_ : str
        The products the evaluations ran in (``"int8"``, ``"bf16"``, ``"fp32"``;
        joined by commas where shards differ).
    precision_note_ : str or None
        Why ``precision_`` is not the precision asked for (None for ``"auto"``).
    graph_ : bool or None
        Whether each iteration of the device L-BFGS ran as one CUDA graph (None:
        the loop ran on the host); ``fit_profile_["graph note"]`` says why not.
    notes_ : list of str
        One line for everything in this fit that fell back from what was asked
        or expected: the precision, the single-host route, the CUDA graph, the
        kernels' fast launch.
    fit_profile_ : dict
        Seconds per step of a single-host fit (export, mapping, L-BFGS, ...);
        on the device also iterations, evaluations, line searches, host
        syncs and the device time of the fit's first evaluation;
        ``"shards joined"``: how many shards sharing the leader's GPU were
        fitted as one, ``"join kept"``: whether that join came from an earlier
        fit on the same blocks (no holder asked), ``"rows kept"``: whether the
        rows fitted (a join, or the leader's own shard alone) came from one,
        ``"state kept"``: whether the device L-BFGS did.
    n_recoveries_ : int
        Times a lost worker's shards were rebuilt elsewhere during the fit.
    loss_ : float
        Objective at the solution.
    converged_ : bool
        Whether L-BFGS met ``tol`` (or stopped decreasing) before ``max_iter``.
    stop_reason_ : str
        Why it stopped ("gradient below gtol", "maximum number of iterations
        reached", ...).
    gradient_max_ : float
        Largest gradient entry (absolute value) where it stopped.

    Examples
    --------
    >>> import numpy as np
    >>> pixels = np.array([[0, 255], [10, 250], [250, 5], [255, 0]], dtype=np.uint8)
    >>> LogisticRegression(input_scale=1 / 255).fit(pixels, [0, 0, 1, 1]).predict(pixels)
    array([0, 0, 1, 1])
    >>> X = np.array([[0.0, 0], [0, 1], [5, 5], [5, 6]])
    >>> clf = LogisticRegression(C=10.0).fit(X, np.array([0, 0, 1, 1]))
    >>> clf.predict(np.array([[0.0, 0.5], [5.0, 5.5]]))
    array([0, 1])
    """

    def __init__(self, C: float = 1.0, *, l1_ratio: float = 0.0, fit_intercept: bool = True,
                 class_weight: Any = None, max_iter: int = 100, tol: float = 1e-4,
                 solver: str = "lbfgs", classes: Any = None, comm: str = "auto",
                 optimizer: str = "auto", precision: str = "auto",
                 input_scale: float | None = None) -> None:
        self.C = C
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.classes = classes
        self.comm = comm
        self.optimizer = optimizer
        self.precision = precision
        self.input_scale = input_scale

    def _check_params(self) -> None:
        options.check(self)

    def _classes_from(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        classes, encoded = inputs.encode_labels(labels, self.classes)
        return labels_mod.at_least_two(classes), encoded

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> "LogisticRegression":
        """Fit on ``X`` (rows x features) and labels ``y``, data-parallel.

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_samples, n_features)
            NumPy blocks of a dask ``X`` go to the GPU of the worker computing each
            where every worker has one.
        y : array-like of shape (n_samples,)
            Class labels of any type scikit-learn accepts.  Integer labels
            persisted beside the rows of a persisted dask ``X`` (the same
            row blocks on the same workers: ``shard(y, client, like=X)``)
            are read where they live: the fit's leader finds their classes
            and encodes them on the GPUs; other labels come to the client
            once per fit and travel with the fit's task.
        sample_weight : array-like of shape (n_samples,) or None, default None
            Each row's weight in the loss (times its class's, with ``class_weight``).
            Fitted as unweighted rows are, each shard's weights sent with its labels.

        Returns
        -------
        self
        """
        self._check_params()
        client = inputs.active_client()
        timeout = config.seconds("cluster.compute-timeout")
        # X's row blocks and their holders, found once (None: not persisted on a cluster).
        rows = None
        if client is not None and isinstance(X, da.Array) and X.ndim == 2:
            moved = inputs.rows_on_gpus(X, client)  # NumPy blocks on GPU workers: to the GPU
            X, rows = moved, (None if moved is not X else spread.located(client, X))
        # Integer labels persisted beside their rows stay there: the fit's leader finds
        # their classes and encodes them on the GPUs (nothing label-sized on the client).
        held = None
        weighted = sample_weight is not None or self.class_weight is not None
        if (self.comm != "actors" and not weighted and rows is not None
                and X.dtype == _rows_dtype(X)):
            held = single_host.labels_beside(X, y, rows, client)
        # Finiteness is checked where the rows are mapped (or by the fit by messages).
        X, labels = inputs.fit_inputs(self, X, y, check_finite=False,
                                      labels_stay=held is not None)
        encoded = None
        if held is None:
            self.classes_, encoded = self._classes_from(labels)
        dtype = _rows_dtype(X)  # uint8 stays 8-bit; the rest becomes float32
        if not isinstance(X, da.Array):
            if inputs.kind_of(X) == "cupy" and client is not None:
                X = X.get()  # shipped to the workers as NumPy rows
            X = (shard(np.asarray(X), client, dtype=dtype) if client is not None
                 else da.from_array(X.astype(dtype, copy=False), chunks=(-1, -1), name=False))
            rows = None
        if X.dtype != dtype or X.numblocks[1] != 1:
            X, rows = X.astype(dtype).rechunk({1: -1}), None
        device = device_of(X)
        if self.optimizer == "device" and device != "gpu":
            raise DataError("optimizer='device' needs the rows on GPUs (CuPy blocks); use "
                            "optimizer='auto' or 'host'")
        n, d = int(X.shape[0]), int(X.shape[1])
        weights = None if held else options.row_weights(self, encoded, self.classes_,
                                                          sample_weight)
        total = float(weights.sum()) if weights is not None else float(n)
        l2, l1 = options.strengths(self.C, self.l1_ratio, total)
        problem = Problem(n, d, None if held else len(self.classes_), l2,
                          self.max_iter, self.tol, self.optimizer, Precision(self.precision),
                          None if self.input_scale is None else float(self.input_scale),
                          self.classes, l1=l1, fit_intercept=bool(self.fit_intercept),
                          weight_sum=None if weights is None else total)
        routes.announce(X, problem, client)
        if weights is not None:
            result = routes.weighted(X, rows, encoded, weights, client, timeout, problem, self.comm)
        elif client is None:
            result = routes.here(X, da.from_array(encoded, chunks=(X.chunks[0],)), problem)
        else:
            result = routes.on_cluster(X, rows, y if held else encoded, held, client, timeout,
                                       problem, self.comm)
        self._keep_result(result, d)
        return self

    def _keep_result(self, result: dict[str, Any], d: int) -> None:
        """The fitted attributes from a fit route's result (:func:`.fitted.keep`)."""
        fitted.keep(self, result, d)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "coef_")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("this LogisticRegression is not fitted yet; call fit(X, y) first")

    def _check_X(self, X: Any) -> da.Array:
        self._check_fitted()
        X = inputs.predict_inputs(self, X)
        if not isinstance(X, da.Array):
            if inputs.kind_of(X) == "cupy" and inputs.active_client() is not None:
                X = X.get()  # travels in the graph to the workers
            X = da.from_array(X, chunks=(-1, -1), name=False)  # no hash of the rows
        return X.astype(_rows_dtype(X)).rechunk({1: -1})

    def _coef_of_rows(self) -> np.ndarray:
        """``coef_.T`` for the rows as passed (``input_scale`` folded in): d x n_classes."""
        coef = self.coef_.T
        return coef if self.input_scale is None else coef * float(self.input_scale)

    def _per_block(self, fn: Any, X: Any, host: bool, name: str, columns: tuple,
                   dtype: Any, *args: Any) -> Any:
        """``fn(block, coef, intercept, *args, host)`` where each row block of ``X`` lives."""
        return placement.map_blocks(inputs.active_client(), fn, X, self._coef_of_rows(),
                                    self.intercept_, *args, host,
                                    name=placement.fresh_name(name),
                                    chunks=(X.chunks[0], *columns),
                                    meta=meta_for("cpu" if host else device_of(X),
                                                  1 + len(columns), dtype), straight=host)

    def predict(self, X: Any, *, on_host: bool = False) -> Any:
        """Most probable class per row, in the type of ``X``.

        For a dask array with a distributed client the work starts at once
        where each row block lives and the result is persisted; without a
        client it is lazy.  NumPy (or any array-like) rows give a NumPy array,
        CuPy rows a CuPy array (NumPy where the labels are strings).

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_samples, n_features)
        on_host : bool, default False
            For dask rows: NumPy chunks even from GPU workers (copied there, in the same task).
        """
        like, X = X, self._check_X(X)
        numeric = inputs.numeric_classes(self.classes_)
        labels = self.classes_ if numeric else np.arange(len(self.classes_))
        pred = self._per_block(predict_block, X, on_host or inputs.kind_of(like) == "host",
                               "logreg-predict", (), labels.dtype, labels)
        return inputs.returned_like(pred, like, None if numeric else self.classes_)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities per row, columns ordered as ``classes_``, in the type of ``X``."""
        return self._scores(X, "proba", proba_block, False)

    def predict_log_proba(self, X: Any) -> Any:
        """The log of :meth:`predict_proba`, taken without underflow (``z - logsumexp(z)``)."""
        return self._scores(X, "log-proba", proba_block, True)

    def decision_function(self, X: Any) -> Any:
        """``X coef + intercept`` per row and class (float64); with two classes, as
        scikit-learn's, the second class's score less the first's, one per row."""
        self._check_fitted()
        two = len(self.classes_) == 2
        return self._scores(X, "decision", decision_block, two, one_column=two)

    def _scores(self, X: Any, name: str, fn: Any, flag: bool, one_column: bool = False) -> Any:
        """``fn(block, coef, intercept, flag, host)`` where each row block lives, float64: a
        column per class (one with ``one_column``), in the type of ``X``."""
        like, X = X, self._check_X(X)
        columns = () if one_column else ((len(self.classes_),),)
        out = self._per_block(fn, X, inputs.kind_of(like) == "host", f"logreg-{name}", columns,
                              np.float64, flag)
        return inputs.returned_like(out, like)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy on ``(X, y)`` (weighted by ``sample_weight`` when given)."""
        pred = self.predict(X, on_host=True)  # NumPy blocks: one Dask stage for dask rows
        if sample_weight is None:
            return accuracy(pred, y)
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(inputs.to_host(y), inputs.to_host(pred),
                                    sample_weight=sample_weight))

    # -- models that travel -------------------------------------------------------------------
    def to_sklearn(self) -> Any:
        """The equivalent fitted ``sklearn.linear_model.LogisticRegression``.

        Same ``coef_`` and ``intercept_`` for three or more classes; with two,
        scikit-learn keeps one row, ``coef_[1] - coef_[0]`` (the same
        probabilities and predictions).  With ``input_scale`` its ``coef_`` is
        ours times ``input_scale``: it predicts from the rows as passed here.
        """
        self._check_fitted()
        return convert.to_sklearn(self)

    @classmethod
    def from_sklearn(cls, model: Any, **params: Any) -> "LogisticRegression":
        """Ours from a fitted scikit-learn ``LogisticRegression`` (the same predictions).

        ``params`` set our other parameters (``comm``, ``input_scale``: the model
        then predicts from the rows scikit-learn's did, and ``coef_`` is its
        ``coef_ / input_scale``).
        """
        ours = cls(C=model.C, max_iter=model.max_iter, tol=model.tol, **params)
        ours._check_params()
        return convert.from_sklearn(ours, model)
