"""Input checks and array placement shared by the estimators.

Both estimators import from here (neither imports the other): scikit-learn's
input validation for host inputs (its error types and messages), the same
checks done where the data lives for dask and CuPy inputs, label encoding,
results returned in the caller's array type, the active client, and
bringing results home without a CUDA context in the client.

This module imports scikit-learn (its import takes seconds): what it sends to the
workers is defined where scikit-learn is not imported (``kernels.launch``,
:mod:`.labels`), so that a worker's first task does not import it.
"""

from __future__ import annotations

import warnings
from typing import Any

import dask.array as da
import numpy as np
from sklearn.exceptions import NotFittedError as _SklearnNotFitted
from sklearn.utils.multiclass import check_classification_targets

from .. import config
from ..exceptions import DataError, DataTypeError, MgpuDaskError
from ..kernels.launch import all_entries_finite, as_numpy, finite_flag, on_gpu, to_gpu
from . import labels as labels_mod
from . import placement, results


class NotFittedError(MgpuDaskError, _SklearnNotFitted):
    """``predict`` or ``kneighbors`` was called before ``fit`` (scikit-learn's type too)."""


def kind_of(X: Any) -> str:
    """``"dask"``, ``"cupy"`` or ``"host"`` (NumPy and anything array-like)."""
    if isinstance(X, da.Array):
        return "dask"
    return "cupy" if on_gpu(X) else "host"


def _validate_data(estimator: Any, X: Any, y: Any = "no_validation", **kwargs: Any) -> Any:
    """scikit-learn's checks; its errors keep their type and message and become ours too
    (so the CLI reports them in one line)."""
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:  # scikit-learn < 1.6
        def validate_data(est: Any, *args: Any, **kw: Any) -> Any:
            return est._validate_data(*args, **kw)
    try:
        return validate_data(estimator, X, y, **kwargs)
    except MgpuDaskError:
        raise
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    except TypeError as exc:
        raise DataTypeError(str(exc)) from exc


_HOST_CHECKS = dict(accept_sparse=False, dtype="numeric")


def fit_inputs(estimator: Any, X: Any, y: Any, *, check_finite: bool = True,
               labels_stay: bool = False) -> tuple[Any, np.ndarray | None]:
    """``(X, labels)`` checked for ``fit``; sets ``n_features_in_`` (and ``feature_names_in_``).

    Host inputs go through scikit-learn's ``validate_data`` (its errors and
    warnings: NaN, empty, sparse, complex, 1-D X, a column-vector y); dask
    and CuPy inputs get the same checks where they live (``check_finite=False``:
    all but NaN and infinity, for a caller that checks them on its way).  The
    labels come back as a NumPy array of any type scikit-learn accepts for
    classes; ``labels_stay`` (a dask ``X`` and integer dask ``y`` that the
    caller reads where they live): only y's shape is checked, labels is None.
    """
    if kind_of(X) == "host":
        X, labels = _validate_data(estimator, X, y, **_HOST_CHECKS)
    else:
        if y is None:
            raise DataError(f"{type(estimator).__name__} requires y to be passed, but the target "
                            "y is None")
        if getattr(X, "ndim", 0) != 2:
            raise DataError(f"X must be 2-D (rows x features), got shape {getattr(X, 'shape', None)}")
        labels = y if labels_stay else to_host(y)
        if labels.ndim == 2 and labels.shape[1] == 1:
            warnings.warn("a column-vector y was passed when a 1d array was expected; "
                          "its single column is used", UserWarning, stacklevel=3)
            labels = labels[:, 0]
        if labels.ndim != 1 or labels.shape[0] != X.shape[0]:
            raise DataError(f"y must be 1-D with one label per row of X ({X.shape[0]}), "
                            f"got shape {labels.shape}")
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise DataError(f"X of shape {tuple(X.shape)} is empty; at least one row and one "
                            "feature are needed")
        if check_finite and not all_finite(X):
            raise DataError("Input X contains NaN or infinity; clean or impute it first")
        estimator.n_features_in_ = int(X.shape[1])
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
        if labels_stay:
            return X, None
    labels = np.asarray(labels)
    if not (labels.ndim == 1 and labels.dtype.kind in "biu"):  # those are always classes
        try:  # (the check sorts the labels: slow at millions, docs/performance-history.md)
            check_classification_targets(labels)
        except ValueError as exc:
            raise DataError(str(exc)) from exc
    return X, labels


def predict_inputs(estimator: Any, X: Any) -> Any:
    """``X`` checked for ``predict``: its feature count (and names) against ``fit``'s."""
    if kind_of(X) == "host":
        return _validate_data(estimator, X, reset=False, **_HOST_CHECKS)
    n = estimator.n_features_in_
    if getattr(X, "ndim", 0) != 2 or X.shape[1] != n:
        got = X.shape[1] if getattr(X, "ndim", 0) == 2 else f"shape {getattr(X, 'shape', None)} of"
        raise DataError(f"X has {got} features, but {type(estimator).__name__} is expecting "
                        f"{n} features as input.")
    return X


def encode_labels(labels: np.ndarray, classes: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)``: the sorted classes and each label's index among them (int32).

    Small non-negative integer labels (digits, MNIST's 8 million deformed
    rows) are counted instead of sorted (:mod:`.labels`).
    """
    found = labels_mod.present(labels)
    classes = labels_mod.classes_from([found], classes)
    return classes, labels_mod.codes(labels, classes)


def numeric_classes(classes: np.ndarray) -> bool:
    """Whether labels can be mapped on the workers (GPU arrays hold numbers only)."""
    return classes.dtype.kind in "biuf"


def returned_like(result: da.Array, like: Any, classes: np.ndarray | None = None) -> Any:
    """``result`` in the caller's array type: NumPy in, NumPy out; CuPy in, CuPy out; dask in,
    a dask array out.

    ``classes``: ``result`` holds class codes to be mapped to these labels on
    the host (labels that GPU arrays cannot hold, such as strings); the
    answer is then NumPy (or dask of NumPy chunks) whatever came in.
    """
    kind = kind_of(like)
    if kind == "dask":
        if classes is None:
            return result
        return result.map_blocks(labels_mod.decoded, classes, dtype=classes.dtype,
                                 meta=np.empty((0,) * result.ndim, classes.dtype))
    out = to_host(result)
    if classes is not None:
        return classes[out]
    if kind == "cupy":
        import cupy

        return cupy.asarray(out)
    return out


def rows_on_gpus(X: da.Array, client: Any) -> da.Array:
    """``X`` with its NumPy row blocks copied to the GPU of the worker computing each,
    where every worker has a GPU (and this process CuPy, for the array's meta); else
    ``X`` as given.  The fit then runs on the GPUs as for CuPy blocks."""
    if client is None or device_of(X) != "cpu":
        return X
    from .workers import detect_device

    if detect_device(client) != "gpu":
        return X
    try:
        import cupy

        meta = cupy.empty((0,) * X.ndim, dtype=X.dtype)
    except (ImportError, RuntimeError):  # no CuPy, or no GPU, in this process
        return X
    return X.map_blocks(to_gpu, dtype=X.dtype, meta=meta)


def active_client() -> Any:
    """The current distributed client, or None (no client, or only a closed one)."""
    try:
        from distributed import get_client

        client = get_client()
    except ValueError:
        return None
    return client if client.status == "running" else None


def device_of(array: Any) -> str:
    meta = getattr(array, "_meta", array)
    return "gpu" if type(meta).__module__.startswith("cupy") else "cpu"


def all_finite(X: Any) -> bool:
    """No NaN or infinity in X: host arrays checked here, CuPy arrays on their GPU, dask arrays
    where their blocks live."""
    if np.issubdtype(X.dtype, np.integer):
        return True
    if isinstance(X, da.Array):
        flags = placement.map_blocks(active_client(), finite_flag, X,
                                     name=placement.fresh_name("finite"),
                                     chunks=((1,) * X.numblocks[0],), meta=np.empty(0, bool))
        return bool(to_host(flags).all())
    return all_entries_finite(X if on_gpu(X) else np.asarray(X))


def to_host(array: Any, timeout: float | None = None) -> np.ndarray:
    """A NumPy copy of a dask, CuPy or NumPy array, within ``timeout`` seconds.

    Dask arrays of CuPy chunks are copied to host memory on their workers, so
    the client never needs a CUDA context to receive them.  ``timeout``
    defaults to ``mgpu-dask.cluster.compute-timeout``; past it, TimeoutError.
    """
    if isinstance(array, da.Array):
        in_hand = placement.blocks_in_hand(array)
        if in_hand is not None:  # answers already brought back (placement.run_straight)
            parts = [as_numpy(p) for p in in_hand]
            return np.concatenate(parts, axis=0) if array.ndim else np.asarray(parts[0])
        client = active_client()
        if client is not None:
            timeout = timeout or config.seconds("cluster.compute-timeout")
            if array.ndim > 1 and array.numblocks[1:] != (1,) * (array.ndim - 1):
                array = array.rechunk({i: -1 for i in range(1, array.ndim)})
            placed = placement.row_futures(array)
            if device_of(array) == "gpu" and all(f is not None for f in placed):
                # Copied to the host where each block lives.
                array = placement.map_blocks(client, as_numpy, array,
                                             name=placement.fresh_name("to-host"),
                                             chunks=array.chunks,
                                             meta=np.empty((0,) * array.ndim, array.dtype))
                placed = placement.row_futures(array)
            elif device_of(array) == "gpu":
                array = array.map_blocks(as_numpy, meta=np.empty((0,) * array.ndim, array.dtype))
            if all(f is not None for f in placed):
                blocks = placed
            else:  # a lazy array: its row blocks, gathered directly (no concatenating task)
                blocks = client.compute(list(array.to_delayed().ravel()), optimize_graph=False)
            try:  # one gather that waits for the blocks (a wait first costs a round trip)
                parts = results.gather(client, blocks, timeout)
            except TimeoutError:
                client.cancel(blocks)
                raise TimeoutError(f"results did not arrive within {timeout:.0f} s") from None
            # Blocks of an array with a wrong _meta (cuML's KNN predict) may still be CuPy.
            parts = [p.get() if on_gpu(p) else p for p in parts]
            return np.concatenate(parts, axis=0) if array.ndim else np.asarray(parts[0])
        array = array.compute()
    return array.get() if hasattr(array, "get") else np.asarray(array)


def accuracy(pred: Any, y: Any) -> float:
    """Share of equal entries, for any mix of dask, CuPy and NumPy arrays."""
    pred, y = to_host(pred), to_host(y)
    if pred.shape != y.shape:
        raise DataError(f"{len(y)} labels for {len(pred)} predictions")
    return float((pred == y).mean())
