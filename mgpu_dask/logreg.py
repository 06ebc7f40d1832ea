"""``LogisticRegression``: multinomial, L2, data-parallel L-BFGS on dask arrays.

Each worker's shard stays where it is (on its GPU as CuPy, or in host memory)
and only coefficients, losses and gradients move.  The estimator checks its
inputs, places and labels the rows, and sends the work to the workers
(``logreg_fit``: one worker fits over every shard of its host, or one Actor per
worker answers each evaluation).  Without a distributed client CuPy rows are
fitted on their GPU by the device loop, other rows by a small graph per
evaluation.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from . import config, inputs, peer_views, placement
from . import labels as labels_mod
from ._compat import scheduler_workers
from .data.shard import meta_for, shard
from .exceptions import DataError, MgpuDaskError
from .inputs import NotFittedError, accuracy, all_finite, device_of
from .kernels import logreg as kernels
from .logreg_fit import (NOT_FINITE, HeldLabels, Problem, ShardLossGrad, alive_workers,
                         fit_on_device, fit_on_leader, lbfgs_on_host, predict_block, proba_block,
                         scaled_call, sum_parts)

COMMS = ("auto", "single-host", "actors")
OPTIMIZERS = ("auto", "device", "host")
PRECISIONS = ("auto", "fp32", "int8", "bf16")
# ShardObjective's name for each precision
_METHOD = {"auto": "auto", "fp32": "cublas", "int8": "int8-or-cublas", "bf16": "bf16-or-cublas"}


def _rows_by_worker(X: da.Array, y: da.Array, client: Any) -> tuple[list, list, dict]:
    """The persisted row blocks of X and y (future, holder) and, per holder, its block indices."""
    found = [placement.locate(client, a) for a in (X, y)]
    if any(f is None for f in found):
        raise MgpuDaskError("could not locate the persisted row blocks of X; persist X first")
    placed, labels = (list(zip(*f)) for f in found)
    by_worker: dict[str, list[int]] = {}
    for i, (_, worker) in enumerate(placed):
        by_worker.setdefault(worker, []).append(i)
    return placed, labels, by_worker


def _label_codes(codes: np.ndarray, n_classes: int) -> np.ndarray:
    """Class indices in the smallest unsigned type that holds them: what travels with the
    export tasks (8.1 million MNIST labels: 8 MB as uint8 instead of 32 as int32)."""
    for dtype in (np.uint8, np.uint16):
        if n_classes <= np.iinfo(dtype).max + 1:
            return codes.astype(dtype)
    return codes.astype(np.int32)


def _rows_dtype(X: Any) -> np.dtype:
    """How rows live for the fit and predict: uint8 stays 8-bit, the rest float32."""
    return np.dtype(np.uint8) if getattr(X, "dtype", None) == np.uint8 else np.dtype(np.float32)


def _labels_beside(X: Any, y: Any, client: Any) -> tuple[list[Any], list[str]] | None:
    """The futures and holders of y's row blocks where y is a persisted dask array of
    integer labels whose blocks lie beside X's (the same rows per block, on the same
    workers): labels the fit reads where they are, so they never travel to the client
    and back."""
    if (client is None or not isinstance(X, da.Array) or not isinstance(y, da.Array)
            or y.ndim != 1 or y.dtype.kind not in "iu" or X.ndim != 2 or X.numblocks[1] != 1
            or X.dtype != _rows_dtype(X) or y.chunks[0] != X.chunks[0]):
        return None
    rows = placement.locate(client, X, remembered=True)
    found = placement.locate(client, y, remembered=True) if rows is not None else None
    if found is None or list(found[1]) != list(rows[1]):
        return None
    return found


def _held_classes(client: Any, held: tuple[list[Any], list[str]], declared: Any) -> np.ndarray:
    """The classes of label blocks that live on the workers (``_labels_beside``; one round
    trip: each holder names the values its block holds)."""
    parts = client.gather([client.submit(labels_mod.present, f, workers=[w], pure=False)
                           for f, w in zip(*held)])
    return labels_mod.classes_from(parts, declared)


class LogisticRegression(ClassifierMixin, BaseEstimator):
    """Multinomial logistic regression with an L2 penalty, fitted on every worker at once.

    Minimises ``mean(cross-entropy) + ||coef||^2 / (2 C n)`` (the intercept is not
    penalised), the objective of scikit-learn's ``LogisticRegression(C=C)``.

    A scikit-learn estimator (``clone``, ``Pipeline``, ``GridSearchCV``,
    ``cross_val_score``): answers come back in the type that came in (NumPy
    in, NumPy out; CuPy in, CuPy out; a dask array in, a dask array out),
    for labels of any type scikit-learn accepts.  The fitted model is host
    arrays only, so it pickles anywhere; :meth:`to_sklearn` and
    :meth:`from_sklearn` convert to and from scikit-learn's estimator.

    Parameters
    ----------
    C : float, default 1.0
        Inverse regularisation strength; must be > 0.
    max_iter : int, default 100
        L-BFGS iterations at most.
    tol : float, default 1e-4
        Stop when the largest gradient entry falls below ``tol``.
    solver : {"lbfgs"}, default "lbfgs"
        Only L-BFGS: one round trip per evaluation, about one evaluation per iteration.
    classes : array-like or None, default None
        The labels allowed; labels outside them are an error.  ``None`` takes
        the labels seen in ``fit``.
    comm : {"auto", "single-host", "actors"}, default "auto"
        How the optimiser reaches the shards.  ``"single-host"``: one worker
        maps every shard of its host and runs the whole fit (an error where
        the shards span hosts or GPUs it cannot see); ``"actors"``: one message
        round per evaluation, any cluster; ``"auto"``: single-host where
        possible, else actors.
    loss_grad : callable or None, default None
        Per-shard ``(X, labels, coef, intercept) -> (loss, grad_coef,
        grad_intercept)``; ``None`` is our fused Numba kernel (the CuPy comparison
        backend passes plain array code).
    optimizer : {"auto", "device", "host"}, default "auto"
        Where the L-BFGS vectors live.  ``"device"``: on the GPU that runs
        the fit, shards evaluated and summed device to device, a few scalars
        read by the host per iteration (every shard on a GPU, single-host or
        no client, ``loss_grad=None``; an error otherwise); ``"host"``: NumPy
        on the host, one gradient download per evaluation; ``"auto"``: the
        device where it can, else the host.

    precision : {"auto", "fp32", "int8", "bf16"}, default "auto"
        The products of each evaluation on a GPU.  ``"fp32"``: float32 cuBLAS
        products.  ``"int8"``: int8 tensor cores where the rows are 8-bit
        levels in [0, 255] times one step (integer multiples of
        ``max|X| / 255``, such as pixels / 255) and the GPU has them (compute
        capability 7.5 or newer): X is read at one byte per value, the
        coefficients and residuals go in as four int8 terms each, and the
        int32 sums are exact, so the loss and gradient are closer to float64's
        than float32 products get; during a fit the rows are held twice more as
        int8 (two bytes per value beside the float32 rows).  ``"bf16"``: bf16 tensor cores for such
        rows (compute capability 8.0 or newer), half the bytes of float32, three
        bf16 terms, ``X^T R`` summed in blocks of
        ``kernels.logreg_bf16.GRADIENT_ROWS`` rows (tensor cores do not round their
        float32 sums to nearest; ``benchmarks/NOTES-logreg.md``, sixth round).
        ``"auto"``: int8 where it applies.  Float32 products wherever the
        chosen one does not apply; the CPU path is float32 always.
        ``fit_profile_["evaluation"]`` says which ran.
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
    fit_profile_ : dict
        Seconds per step of a single-host fit (export, mapping, L-BFGS, ...);
        on the device also iterations, evaluations, line searches, host
        syncs and the device time of the fit's first evaluation.
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

    def __init__(self, C: float = 1.0, *, max_iter: int = 100, tol: float = 1e-4,
                 solver: str = "lbfgs", classes: Any = None, comm: str = "auto",
                 loss_grad: Any = None, optimizer: str = "auto",
                 precision: str = "auto", input_scale: float | None = None) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.classes = classes
        self.comm = comm
        self.loss_grad = loss_grad
        self.optimizer = optimizer
        self.precision = precision
        self.input_scale = input_scale

    def _check_params(self) -> None:
        if not (isinstance(self.C, (int, float, np.floating)) and self.C > 0 and np.isfinite(self.C)):
            raise DataError(f"C={self.C!r} must be a positive number (e.g. 1.0)")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 1:
            raise DataError(f"max_iter={self.max_iter!r} must be a positive integer")
        if self.solver != "lbfgs":
            raise DataError(f"solver={self.solver!r} is not available; use 'lbfgs'")
        if self.comm not in COMMS:
            raise DataError(f"comm={self.comm!r} is not one of {', '.join(COMMS)}")
        if self.optimizer not in OPTIMIZERS:
            raise DataError(f"optimizer={self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.precision not in PRECISIONS:
            raise DataError(f"precision={self.precision!r} is not one of {', '.join(PRECISIONS)}")
        scale = self.input_scale
        if scale is not None and not (isinstance(scale, (int, float, np.floating))
                                      and np.isfinite(scale) and scale > 0):
            raise DataError(f"input_scale={scale!r} must be a positive number (e.g. 1/255) "
                            "or None")
        if self.optimizer == "device" and self.loss_grad is not None:
            raise DataError("optimizer='device' runs our kernel only; pass loss_grad=None or "
                            "optimizer='host'")

    def _classes_from(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        classes, encoded = inputs.encode_labels(labels, self.classes)
        return labels_mod.at_least_two(classes), encoded

    def fit(self, X: Any, y: Any) -> "LogisticRegression":
        """Fit on ``X`` (rows x features) and labels ``y``, data-parallel.

        Parameters
        ----------
        X : dask.array.Array, cupy.ndarray or array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels of any type scikit-learn accepts.  Integer labels
            persisted beside the rows of a persisted dask ``X`` (the same
            row blocks on the same workers: ``shard(y, client, like=X)``)
            are read where they live: the fit's leader finds their classes
            and encodes them on the GPUs; other labels come to the client
            once per fit and travel with the fit's task.

        Returns
        -------
        self
        """
        self._check_params()
        client = inputs.active_client()
        # Integer labels persisted beside their rows stay there: the fit's leader finds
        # their classes and encodes them on the GPUs (nothing label-sized on the client).
        held = _labels_beside(X, y, client) if self.comm != "actors" else None
        # Finiteness is checked where the rows are mapped (or by the fit by messages).
        X, labels = inputs.fit_inputs(self, X, y, check_finite=False,
                                      labels_stay=held is not None)
        timeout = config.seconds("cluster.compute-timeout")
        encoded = None
        if held is None:
            self.classes_, encoded = self._classes_from(labels)
        rows = _rows_dtype(X)  # uint8 stays 8-bit; the rest becomes float32
        if not isinstance(X, da.Array):
            if inputs.kind_of(X) == "cupy" and client is not None:
                X = X.get()  # shipped to the workers as NumPy rows
            X = (shard(np.asarray(X), client, dtype=rows) if client is not None
                 else da.from_array(X.astype(rows, copy=False), chunks=(-1, -1)))
        X = X.astype(rows).rechunk({1: -1})
        device = device_of(X)
        if self.optimizer == "device" and device != "gpu":
            raise DataError("optimizer='device' needs the rows on GPUs (CuPy blocks); use "
                            "optimizer='auto' or 'host'")
        n, d = int(X.shape[0]), int(X.shape[1])
        problem = Problem(n, d, None if held else len(self.classes_), 1.0 / (self.C * n),
                          {"maxiter": self.max_iter, "gtol": self.tol,
                           "optimizer": self.optimizer, "method": _METHOD[self.precision],
                           "scale": None if self.input_scale is None
                           else float(self.input_scale), "classes": self.classes})
        self.n_recoveries_ = 0
        self.comm_note_ = None
        result = None
        if client is None:
            y_enc = da.from_array(encoded, chunks=(X.chunks[0],))
            result = self._fit_here_on_device(X, y_enc, problem)
        else:
            from distributed import futures_of, wait

            if placement.locate(client, X, remembered=True) is None:
                X = client.persist(X)
                wait(futures_of(X), timeout=timeout)
            if self.comm != "actors":
                result = self._fit_single_host(X, encoded if held is None else held[0], client,
                                               timeout, problem)
            if result is None and held is not None:  # by messages: the classes first
                self.classes_ = labels_mod.at_least_two(_held_classes(client, held, self.classes))
                problem = problem._replace(n_classes=len(self.classes_))
                y_enc = placement.map_blocks(client, labels_mod.codes, y, self.classes_,
                                             name=placement.fresh_name("label-codes"),
                                             chunks=y.chunks, meta=y._meta.astype(np.int32))
            elif result is None:  # each label block goes to the worker holding its rows
                y_enc = shard(encoded, client, device=device, dtype=np.int32, timeout=timeout,
                              like=X)
        if result is None:
            result = self._fit_by_messages(X, y_enc, client, timeout, problem)
        if "classes" in result:  # found by the leader, where the labels live
            self.classes_ = result["classes"]
            problem = problem._replace(n_classes=len(self.classes_))
        theta = result["x"]
        k = problem.n_classes
        self.coef_ = theta[: d * k].reshape(d, k).T.copy()
        self.intercept_ = theta[d * k:].copy()
        self.n_iter_ = int(result["nit"])
        self.n_evaluations_ = int(result["nfev"])
        self.n_round_trips_ = int(result["round_trips"])
        self.comm_ = result["comm"]
        self.optimizer_ = result.get("optimizer", "host")
        self.loss_ = float(result["fun"])
        self.converged_ = bool(result["success"])
        self.stop_reason_ = str(result.get("message", ""))
        self.gradient_max_ = float(result.get("grad_max", np.nan))
        self.fit_profile_ = result.get("profile", {})
        self.n_features_in_ = d
        return self

    def _fit_here_on_device(self, X: da.Array, y: da.Array,
                            problem: "Problem") -> dict[str, Any] | None:
        """No client, CuPy blocks: the device L-BFGS in this process; None where it does not apply."""
        if self.loss_grad is not None or self.optimizer == "host" or device_of(X) != "gpu":
            return None
        X_blocks = dask.compute(*X.to_delayed().ravel())
        if not all(all_finite(b) for b in X_blocks):
            raise DataError(NOT_FINITE)
        y_blocks = dask.compute(*y.to_delayed().ravel())
        import cupy

        arrays = [(b, cupy.asarray(yb)) for b, yb in zip(X_blocks, y_blocks)]
        with cupy.cuda.Device(X_blocks[0].device.id):
            result = fit_on_device(arrays, problem)
        return {**result, "round_trips": 0, "comm": "graph"}

    def _fit_by_messages(self, X: da.Array, y: da.Array, client: Any, timeout: float,
                         problem: "Problem") -> dict[str, Any]:
        """L-BFGS on the client, one message round per evaluation (any cluster)."""
        if self.optimizer == "device":
            raise DataError("optimizer='device' needs a single-host fit (comm='auto' or "
                            "'single-host', every shard on a GPU of one host)")
        if not all_finite(X):
            raise DataError(NOT_FINITE)
        scale = problem.options["scale"]
        evaluate = (_ActorEvaluator(X, y, client, timeout, self.loss_grad,
                                    problem.options["method"], scale)
                    if client is not None
                    else _GraphEvaluator(X, y, self.loss_grad, scale))
        try:
            result = lbfgs_on_host(evaluate, problem)
        finally:
            evaluate.close()
        self.n_recoveries_ += getattr(evaluate, "rebuilds", 0)
        return {**result, "round_trips": evaluate.calls, "optimizer": "host",
                "comm": "actors" if client is not None else "graph"}

    def _fit_single_host(self, X: da.Array, labels: Any, client: Any, timeout: float,
                         problem: "Problem") -> dict[str, Any] | None:
        """The whole L-BFGS in one worker that maps every shard of its host.

        One task, on the worker with the most rows (``fit_on_leader``): it
        asks each other holder to export its rows and their labels (sent with
        the task, or ``labels`` are the futures of label blocks beside the
        rows: read there) by CUDA IPC / shared memory, exports its own in
        place, opens them all and evaluates every shard on its own GPU with
        no Dask message per step, and has the holders release their exports
        before it returns: one Dask round trip per fit.  Returns None (with
        the reason in ``comm_note_``) when that cannot be done here.
        """
        token = uuid.uuid4().hex
        found = placement.locate(client, X, remembered=True)
        if found is None:
            raise MgpuDaskError("could not locate the persisted row blocks of X; persist X first")
        futures, where = found
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])])
        by_worker: dict[str, list[int]] = {}
        for i, worker in enumerate(where):
            by_worker.setdefault(worker, []).append(i)
        rows = {w: sum(X.chunks[0][i] for i in idx) for w, idx in by_worker.items()}
        held = isinstance(labels, list)
        if not held:
            labels = _label_codes(labels, problem.n_classes)
        leader = max(rows, key=rows.get)
        # The leader's own blocks are the task's inputs (they are there); the others
        # are named by their keys and exported by their holders when the leader asks:
        # nothing but the exports' small descriptions travels.
        shards: list[Any] = []
        for worker, idx in by_worker.items():
            if held:
                codes = ([labels[i] for i in idx] if worker == leader
                         else HeldLabels([labels[i].key for i in idx]))
            else:
                codes = np.concatenate([labels[starts[i]:starts[i + 1]] for i in idx])
            if worker == leader:
                shards.append({"own rows": [futures[i] for i in idx], "labels": codes,
                               "token": token})
            else:
                shards.append({"address": worker, "keys": [futures[i].key for i in idx],
                               "labels": codes, "token": token})
        fit = client.submit(fit_on_leader, shards, problem, self.loss_grad, workers=[leader],
                            allow_other_workers=True, pure=False,
                            key=f"logreg-fit-{token[:12]}")
        started, submitted = time.perf_counter(), time.time()
        exporters: set[str] | None = None
        try:
            result = fit.result(timeout=timeout)
            arrived = time.time()
            exporters = set(result.pop("exporters")) - set(result.pop("released"))
            if "refused" in result:
                if result["refused"] == "not finite":
                    raise DataError(NOT_FINITE)
                if result["refused"] == "labels":
                    raise DataError(result["message"])
                raise peer_views.PeerUnavailable(result["refused"])
            profile = result["profile"]
            result["profile"] = {
                "export and fit": time.perf_counter() - started,
                "submission to leader": profile.pop("leader began at") - submitted,
                "leader to client": arrived - profile.pop("leader ended at"), **profile}
            return {**result, "round_trips": 1, "comm": "single-host"}
        except (DataError, TimeoutError):
            raise
        except Exception as exc:
            alive = set(client.run_on_scheduler(alive_workers))
            lost = not set(by_worker) <= alive
            if not lost and (self.comm == "single-host"
                             or not isinstance(exc, peer_views.PeerUnavailable)):
                raise
            # Shards that cannot be mapped from one worker, or a worker lost
            # on the way: fit by messages (which rebuilds lost shards).
            self.n_recoveries_ += int(lost)
            self.comm_note_ = (f"single-host fit lost a worker ({type(exc).__name__}: {exc}); "
                               "refitted by actors" if lost else str(exc))
            return None
        finally:
            # The leader had the exporters free their copies; after a failure, every
            # live worker looks for the token.
            if exporters is None:
                exporters = set(client.run_on_scheduler(alive_workers))
            if exporters:  # none when every shard was the leader's own
                client.run(peer_views.release, token, workers=sorted(exporters),
                           on_error="ignore")

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
            X = da.from_array(X, chunks=(-1, -1))
        return X.astype(_rows_dtype(X)).rechunk({1: -1})

    def _coef_of_rows(self) -> np.ndarray:
        """``coef_.T`` for the rows as passed (``input_scale`` folded in): d x n_classes."""
        coef = self.coef_.T
        return coef if self.input_scale is None else coef * float(self.input_scale)

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
        like = X
        X = self._check_X(X)
        host = on_host or inputs.kind_of(like) == "host"
        numeric = inputs.numeric_classes(self.classes_)
        labels = self.classes_ if numeric else np.arange(len(self.classes_))
        pred = placement.map_blocks(inputs.active_client(), predict_block, X,
                                    self._coef_of_rows(),
                                    self.intercept_, labels, host,
                                    name=placement.fresh_name("logreg-predict"),
                                    chunks=(X.chunks[0],),
                                    meta=meta_for("cpu" if host else device_of(X), 1,
                                                  labels.dtype))
        return inputs.returned_like(pred, like, None if numeric else self.classes_)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities per row, columns ordered as ``classes_``, in the type of ``X``."""
        like = X
        X = self._check_X(X)
        host = inputs.kind_of(like) == "host"
        proba = placement.map_blocks(inputs.active_client(), proba_block, X,
                                     self._coef_of_rows(),
                                     self.intercept_, host,
                                     name=placement.fresh_name("logreg-proba"),
                                     chunks=(X.chunks[0], (len(self.classes_),)),
                                     meta=meta_for("cpu" if host else device_of(X), 2,
                                                   np.float64))
        return inputs.returned_like(proba, like)

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
        from sklearn.linear_model import LogisticRegression as SklearnLR

        model = SklearnLR(C=self.C, max_iter=self.max_iter, tol=self.tol, solver="lbfgs")
        model.classes_ = self.classes_.copy()
        coef = self._coef_of_rows().T
        if len(self.classes_) == 2:
            model.coef_ = (coef[1] - coef[0])[None, :].astype(np.float64)
            model.intercept_ = np.array([self.intercept_[1] - self.intercept_[0]], np.float64)
        else:
            model.coef_ = coef.astype(np.float64)
            model.intercept_ = self.intercept_.astype(np.float64)
        model.n_features_in_ = self.n_features_in_
        if hasattr(self, "feature_names_in_"):
            model.feature_names_in_ = self.feature_names_in_
        model.n_iter_ = np.array([self.n_iter_])
        return model

    @classmethod
    def from_sklearn(cls, model: Any, **params: Any) -> "LogisticRegression":
        """Ours from a fitted scikit-learn ``LogisticRegression`` (the same predictions).

        ``params`` set our other parameters (``comm``, ``input_scale``: the model
        then predicts from the rows scikit-learn's did, and ``coef_`` is its
        ``coef_ / input_scale``).
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(model)
        coef = np.asarray(model.coef_, dtype=np.float64)
        intercept = np.asarray(model.intercept_, dtype=np.float64)
        if len(model.classes_) == 2 and coef.shape[0] == 1:  # binary: one row, split in two
            coef = np.vstack([-coef[0] / 2, coef[0] / 2])
            intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
        ours = cls(C=model.C, max_iter=model.max_iter, tol=model.tol, **params)
        ours._check_params()
        if ours.input_scale is not None:
            coef = coef / float(ours.input_scale)
        ours.classes_ = np.asarray(model.classes_)
        ours.coef_, ours.intercept_ = coef, intercept
        ours.n_features_in_ = int(model.n_features_in_)
        if hasattr(model, "feature_names_in_"):
            ours.feature_names_in_ = model.feature_names_in_
        ours.n_iter_ = int(np.max(getattr(model, "n_iter_", [0])))
        return ours


class _ActorEvaluator:
    """Loss and gradient through one Actor per worker holding its blocks."""

    def __init__(self, X: da.Array, y: da.Array, client: Any, timeout: float,
                 loss_grad: Any, method: str = "cublas", scale: float | None = None) -> None:
        self._shard_fn = loss_grad
        self._method = method
        self._scale = scale
        self.timeout = timeout
        self.calls = 0
        self.rebuilds = 0
        self._client = client
        self._keep = (X, y)
        self._start_actors()

    def _start_actors(self) -> None:
        deadline = time.perf_counter() + self.timeout
        while True:
            try:
                self.actors = self._try_start_actors(deadline)
                return
            except (OSError, RuntimeError) as exc:  # "Worker holding Actor was lost"
                if isinstance(exc, TimeoutError) or time.perf_counter() > deadline:
                    raise
                # A worker died while the actors started: its blocks get rebuilt; again.

    def _try_start_actors(self, deadline: float) -> list[Any]:
        from distributed import futures_of, wait

        client, (X, y), timeout = self._client, self._keep, self.timeout
        while True:  # after a worker loss, lost blocks are recomputed and get a holder
            wait(futures_of([X, y]), timeout=max(1.0, deadline - time.perf_counter()))
            placed, labels, by_worker = _rows_by_worker(X, y, client)
            alive = set(client.run_on_scheduler(alive_workers))
            if all(w in alive for _, w in placed + labels):  # who_has can lag a death
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(f"row blocks of X had no worker after {timeout:.0f} s")
            time.sleep(0.1)
        # Loose placement: should that worker die now, the actor starts on another.
        started = [client.submit(ShardLossGrad, len(idx), *[placed[i][0] for i in idx],
                                 *[labels[i][0] for i in idx], loss_grad=self._shard_fn,
                                 method=self._method, scale=self._scale, workers=[worker],
                                 allow_other_workers=True, actor=True,
                                 key=f"logreg-shard-{uuid.uuid4().hex[:12]}")
                   for worker, idx in by_worker.items()]
        return [f.result(timeout=max(1.0, deadline - time.perf_counter())) for f in started]

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        self.calls += 1
        try:
            parts = self._evaluate(coef, intercept)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if isinstance(exc, TimeoutError) or self.rebuilds >= 3:
                raise
            # A worker died (its actor with it): its shards are rebuilt from their
            # slices on the survivors, new actors take them, and L-BFGS goes on.
            self.rebuilds += 1
            self._start_actors()
            parts = self._evaluate(coef, intercept)
        return sum_parts(parts)

    def _evaluate(self, coef: np.ndarray, intercept: np.ndarray) -> list:
        pending = [(a, a.loss_grad(coef, intercept)) for a in self.actors]
        deadline = time.perf_counter() + self.timeout
        parts = []
        for actor, future in pending:
            while True:  # a call to a dead worker may never answer: look, every 2 s
                try:
                    parts.append(future.result(timeout=2.0))  # stops waiting, not the call
                    break
                except TimeoutError:
                    workers = scheduler_workers(self._client)
                    if actor._address not in workers:
                        raise OSError(f"worker {actor._address} (holding a shard) was lost")
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"a loss/gradient evaluation took over "
                                           f"{self.timeout:.0f} s") from None
        return parts

    def close(self) -> None:
        self.actors = []
        self._keep = None


class _GraphEvaluator:
    """Loss and gradient as one small graph per evaluation (no distributed client)."""

    def __init__(self, X: da.Array, y: da.Array, loss_grad: Any,
                 scale: float | None = None) -> None:
        self._shard_fn = functools.partial(scaled_call, loss_grad or kernels.loss_grad, scale)
        self._keep = (X.persist(), y.persist())  # the persisted blocks live while referenced
        self.pairs = list(zip(self._keep[0].to_delayed().ravel(), self._keep[1].to_delayed().ravel()))
        self.calls = 0

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        self.calls += 1
        return sum_parts(dask.compute(*[dask.delayed(self._shard_fn)(xb, yb, coef, intercept)
                                         for xb, yb in self.pairs]))

    def close(self) -> None:
        self.pairs = []
        self._keep = None
