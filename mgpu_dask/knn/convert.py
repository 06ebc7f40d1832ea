"""Our fitted KNN classifier to and from scikit-learn's (brute force, the same metric)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import DataError


def to_sklearn(ours: Any) -> Any:
    """The fitted ``sklearn.neighbors.KNeighborsClassifier`` that predicts as ``ours``."""
    from sklearn.neighbors import KNeighborsClassifier as SklearnKNN

    if ours.metric == "inner_product":
        raise DataError("scikit-learn has no inner-product metric; a model with "
                        "metric='inner_product' does not convert")
    model = SklearnKNN(n_neighbors=ours.n_neighbors, weights=ours.weights, algorithm="brute",
                       metric=ours.metric)
    return model.fit(ours._rows_home(), ours.classes_[ours._train_codes])


def _metric_of(model: Any) -> str:
    name, extra = model.effective_metric_, dict(model.effective_metric_params_ or {})
    if name == "minkowski" and extra.get("p", 2) == 2 and set(extra) <= {"p"}:
        return "euclidean"
    if name in ("euclidean", "sqeuclidean", "cosine") and not extra:
        return name
    raise DataError(f"the model's metric is {name} {extra or ''}".rstrip() +
                    "; euclidean, sqeuclidean and cosine distances run here")


def from_sklearn(cls: type, model: Any, params: dict[str, Any]) -> Any:
    """``cls`` (ours) fitted as scikit-learn's ``model``: its rows placed on first use."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    params = {"metric": _metric_of(model), **params}
    if model.weights not in ("uniform", "distance") or np.ndim(model._y) != 1:
        raise DataError("only single-output models with uniform or distance weights convert")
    rows = model._fit_X
    if hasattr(rows, "toarray"):
        rows = rows.toarray()
    ours = cls(n_neighbors=model.n_neighbors, weights=model.weights, **params)
    ours._check_params(int(rows.shape[0]))
    ours.classes_ = np.asarray(model.classes_)
    ours._train_source = np.asarray(rows)
    ours._train_codes = np.asarray(model._y, dtype=np.int32)
    ours.n_features_in_ = int(rows.shape[1])
    if hasattr(model, "feature_names_in_"):
        ours.feature_names_in_ = model.feature_names_in_
    ours.n_samples_fit_ = int(rows.shape[0])
    ours.layout_ = None
    return ours
