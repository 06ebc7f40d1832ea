"""Our fitted logistic regression to and from scikit-learn's."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_sklearn(ours: Any) -> Any:
    """The fitted ``sklearn.linear_model.LogisticRegression`` that predicts as ``ours``."""
    from sklearn.linear_model import LogisticRegression as SklearnLR

    model = SklearnLR(C=ours.C, max_iter=ours.max_iter, tol=ours.tol, solver="lbfgs")
    model.classes_ = ours.classes_.copy()
    coef = ours._coef_of_rows().T
    if len(ours.classes_) == 2:
        model.coef_ = (coef[1] - coef[0])[None, :].astype(np.float64)
        model.intercept_ = np.array([ours.intercept_[1] - ours.intercept_[0]], np.float64)
    else:
        model.coef_ = coef.astype(np.float64)
        model.intercept_ = ours.intercept_.astype(np.float64)
    model.n_features_in_ = ours.n_features_in_
    if hasattr(ours, "feature_names_in_"):
        model.feature_names_in_ = ours.feature_names_in_
    model.n_iter_ = np.array([ours.n_iter_])
    return model


def from_sklearn(ours: Any, model: Any) -> Any:
    """``ours`` (unfitted, parameters set) given the coefficients of the fitted
    scikit-learn ``model``; returns it."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    coef = np.asarray(model.coef_, dtype=np.float64)
    intercept = np.asarray(model.intercept_, dtype=np.float64)
    if len(model.classes_) == 2 and coef.shape[0] == 1:  # binary: one row, split in two
        coef = np.vstack([-coef[0] / 2, coef[0] / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    if ours.input_scale is not None:
        coef = coef / float(ours.input_scale)
    ours.classes_ = np.asarray(model.classes_)
    ours.coef_, ours.intercept_ = coef, intercept
    ours.n_features_in_ = int(model.n_features_in_)
    if hasattr(model, "feature_names_in_"):
        ours.feature_names_in_ = model.feature_names_in_
    ours.n_iter_ = int(np.max(getattr(model, "n_iter_", [0])))
    return ours
