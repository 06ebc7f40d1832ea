"""A logistic regression's options checked, and its rows' weights: what the estimator asks
before a fit, spelled as scikit-learn 1.8 spells it (``C=np.inf`` for no penalty,
``l1_ratio`` for the L1 share of an elastic net, ``class_weight``, ``sample_weight``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import DataError
from ..kernels.precision import Precision
from ..parallel import inputs

COMMS = ("auto", "single-host", "actors")
OPTIMIZERS = ("auto", "device", "host")
PRECISIONS = (Precision.AUTO, Precision.FP32, Precision.INT8, Precision.BF16)


def check(model: Any) -> None:
    """One clear DataError for the first option out of its range."""
    C = model.C
    if not (isinstance(C, (int, float, np.floating)) and C > 0 and not np.isnan(C)):
        raise DataError(f"C={C!r} must be a positive number (e.g. 1.0), or np.inf for no "
                        "penalty")
    ratio = model.l1_ratio
    if not (isinstance(ratio, (int, float, np.floating)) and 0 <= ratio <= 1):
        raise DataError(f"l1_ratio={ratio!r} must be a number in [0, 1] (0: L2, 1: L1)")
    if not isinstance(model.fit_intercept, (bool, np.bool_)):
        raise DataError(f"fit_intercept={model.fit_intercept!r} must be True or False")
    weight = model.class_weight
    if weight is not None and weight != "balanced" and not isinstance(weight, dict):
        raise DataError(f"class_weight={weight!r} must be None, 'balanced' or a dict "
                        "{label: weight}")
    if not isinstance(model.max_iter, (int, np.integer)) or model.max_iter < 1:
        raise DataError(f"max_iter={model.max_iter!r} must be a positive integer")
    if not (isinstance(model.tol, (int, float, np.floating)) and model.tol >= 0):
        raise DataError(f"tol={model.tol!r} must be a number >= 0")
    if model.solver != "lbfgs":
        raise DataError(f"solver={model.solver!r} is not available; use 'lbfgs' (with "
                        "l1_ratio > 0 it runs OWL-QN, L-BFGS for an L1 penalty)")
    for name, value, allowed in (("comm", model.comm, COMMS),
                                 ("optimizer", model.optimizer, OPTIMIZERS)):
        if value not in allowed:
            raise DataError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    if model.precision not in PRECISIONS:
        raise DataError(f"precision={model.precision!r} is not one of "
                        f"{', '.join(p.value for p in PRECISIONS)}")
    scale = model.input_scale
    if scale is not None and not (isinstance(scale, (int, float, np.floating))
                                  and np.isfinite(scale) and scale > 0):
        raise DataError(f"input_scale={scale!r} must be a positive number (e.g. 1/255) "
                        "or None")


def strengths(C: float, l1_ratio: float, total: float) -> tuple[float, float]:
    """The L2 and L1 strengths of ``mean(cross-entropy) + penalty`` over ``total`` rows
    (or the weights' sum): ``(1 - l1_ratio) / (C total)`` and ``l1_ratio / (C total)``."""
    if not np.isfinite(C):
        return 0.0, 0.0
    return (1.0 - l1_ratio) / (C * total), l1_ratio / (C * total)


def row_weights(model: Any, codes: np.ndarray, classes: np.ndarray,
                sample_weight: Any) -> np.ndarray | None:
    """Each row's weight, ``sample_weight`` times its class's weight (scikit-learn's
    ``compute_class_weight``: ``"balanced"`` is rows / (classes x the class's rows), the
    rows counted with their sample weights); None where neither is given."""
    if sample_weight is None and model.class_weight is None:
        return None
    n = len(codes)
    if sample_weight is None:
        weights = np.ones(n, dtype=np.float64)
    else:
        if inputs.kind_of(sample_weight) in ("cupy", "dask"):
            sample_weight = inputs.to_host(sample_weight)
        weights = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if weights.shape != (n,):
            raise DataError(f"sample_weight has {weights.size} values for {n} rows; give one "
                            "per row")
        if not np.isfinite(weights).all() or (weights < 0).any():
            raise DataError("sample_weight must be finite and non-negative")
    if model.class_weight is not None:
        from sklearn.utils.class_weight import compute_class_weight

        labels = classes[codes]
        weight = model.class_weight
        try:
            per_class = compute_class_weight(weight, classes=classes, y=labels,
                                             sample_weight=weights)
        except (TypeError, ValueError) as exc:
            raise DataError(f"class_weight={weight!r}: {exc}") from None
        weights = weights * per_class[codes]
    if weights.sum() <= 0:
        raise DataError("the sample weights sum to zero: nothing to fit")
    return weights
