"""scikit-learn's logistic-regression options, spelled as scikit-learn 1.8 spells them, give
scikit-learn's solution: ``sample_weight``, ``class_weight``, ``fit_intercept``, ``C=np.inf``,
``l1_ratio`` (OWL-QN against ``saga``, the same zeros), ``decision_function`` and
``predict_log_proba``; without a client and on the session's CPU cluster."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SklearnLR

from mgpu_dask import DataError, LogisticRegression
from mgpu_dask.logreg.lbfgs.loop import minimize_lbfgs
from mgpu_dask.logreg.lbfgs.owlqn import pseudo_gradient


def _problem(seed, n=400, d=6, labels=(3, 7, 100)):
    """Rows and labels of a random linear model with Gumbel noise: something to learn."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, d)
    W = rng.standard_normal((d, len(labels)))
    y = np.asarray(labels)[np.argmax(X @ W + rng.gumbel(size=(n, len(labels))), axis=1)]
    return X, y, rng


def _close(ours, sk, rtol=1e-3):
    scale = max(np.abs(sk.coef_).max(), 1e-12)
    assert np.abs(ours.coef_ - sk.coef_).max() <= rtol * scale, (ours.coef_, sk.coef_)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=rtol * max(1.0, scale))


CASES = [
    ({}, False),
    ({"C": np.inf}, False),
    ({"C": 0.3, "fit_intercept": False}, False),
    ({"class_weight": "balanced"}, False),
    ({}, True),                                              # sample weights
    ({"C": 2.0, "class_weight": {3: 2.0, 7: 1.0, 100: 0.5}}, True),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("params, weighted", CASES)
def test_options_give_scikit_learns_solution(params, weighted, seed):
    X, y, rng = _problem(seed)
    fit = {"sample_weight": rng.uniform(0.2, 3.0, len(y))} if weighted else {}
    ours = LogisticRegression(max_iter=1000, tol=1e-6, **params).fit(X, y, **fit)
    sk = SklearnLR(max_iter=10_000, tol=1e-10, **params).fit(X, y, **fit)
    _close(ours, sk)
    if params.get("fit_intercept") is False:
        assert (ours.intercept_ == 0).all()
    np.testing.assert_array_equal(ours.predict(X), sk.predict(X))


@pytest.mark.parametrize("l1_ratio, C", [(0.5, 0.1), (1.0, 0.05), (0.2, 0.3)])
def test_l1_and_elastic_net_give_saga_s_solution_and_zeros(l1_ratio, C):
    X, y, _ = _problem(int(l1_ratio * 10), d=8)
    ours = LogisticRegression(C=C, l1_ratio=l1_ratio, max_iter=3000, tol=1e-7).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saga's convergence warnings
        sk = SklearnLR(C=C, l1_ratio=l1_ratio, solver="saga", max_iter=100_000,
                       tol=1e-12).fit(X, y)
    _close(ours, sk)
    np.testing.assert_array_equal(ours.coef_ == 0, sk.coef_ == 0)
    if l1_ratio == 1.0:
        assert (ours.coef_ == 0).any()  # the L1 solution has exact zeros


def test_options_on_a_cluster_equal_the_fit_here(client):
    X, y, rng = _problem(5, n=600)
    w = rng.uniform(0.5, 2.0, len(y))
    Xd = da.from_array(X.astype(np.float32), chunks=150)
    for params, fit in (({"class_weight": "balanced"}, {"sample_weight": w}),
                        ({"l1_ratio": 0.5, "C": 0.2}, {}), ({"fit_intercept": False}, {})):
        here = LogisticRegression(max_iter=500, tol=1e-7, **params).fit(X.astype(np.float32), y,
                                                                        **fit)
        there = LogisticRegression(max_iter=500, tol=1e-7, **params).fit(Xd, y, **fit)
        np.testing.assert_allclose(there.coef_, here.coef_, rtol=1e-3, atol=1e-4)
        sk = SklearnLR(max_iter=10_000, tol=1e-10, solver="saga" if "l1_ratio" in params
                       else "lbfgs", **params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk.fit(X.astype(np.float32), y, **fit)
        _close(there, sk, rtol=2e-3)


def test_scores_and_log_probabilities_are_scikit_learns():
    X, y, _ = _problem(2)
    ours = LogisticRegression(max_iter=1000, tol=1e-8).fit(X, y)
    sk = SklearnLR(max_iter=10_000, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(ours.decision_function(X), sk.decision_function(X), atol=1e-3)
    np.testing.assert_allclose(ours.predict_log_proba(X), sk.predict_log_proba(X), atol=1e-3)
    far = X * 1e4  # log-probabilities far below float64's smallest probability stay finite
    assert np.isfinite(ours.predict_log_proba(far)).all()
    binary = (y == 3).astype(int)
    two = LogisticRegression(max_iter=1000, tol=1e-8).fit(X, binary)
    scores = two.decision_function(da.from_array(X, chunks=100)).compute()
    assert scores.shape == (len(X),)
    np.testing.assert_array_equal(scores > 0, two.predict(X) == 1)


def test_owlqn_finds_the_lasso_s_zeros():
    """min 0.5 |x - c|^2 + lam |x|_1 is soft-thresholding: x = sign(c) max(|c| - lam, 0)."""
    rng = np.random.default_rng()
    c = rng.standard_normal(30) * 2
    lam = np.full(30, 0.8)
    out = minimize_lbfgs(lambda x: (0.5 * float((x - c) @ (x - c)), x - c), np.zeros(30),
                         maxiter=200, gtol=1e-10, l1=lam)
    np.testing.assert_allclose(out["x"], np.sign(c) * np.maximum(np.abs(c) - 0.8, 0), atol=1e-8)
    assert ((out["x"] == 0) == (np.abs(c) <= 0.8)).all()
    assert np.abs(pseudo_gradient(out["x"], out["x"] - c, lam)).max() < 1e-8


@pytest.mark.parametrize("params, match", [
    ({"C": 0}, "C=0 must be a positive number"),
    ({"l1_ratio": 1.5}, r"l1_ratio=1.5 must be a number in \[0, 1\]"),
    ({"class_weight": "equal"}, "class_weight='equal' must be None, 'balanced' or a dict"),
    ({"fit_intercept": "no"}, "fit_intercept='no' must be True or False"),
])
def test_bad_options_are_one_clear_error(params, match):
    with pytest.raises(DataError, match=match):
        LogisticRegression(**params).fit(np.eye(4), [0, 1, 0, 1])


def test_bad_sample_weights_are_one_clear_error():
    with pytest.raises(DataError, match="sample_weight has 3 values for 4 rows"):
        LogisticRegression().fit(np.eye(4), [0, 1, 0, 1], sample_weight=[1, 2, 3])
    with pytest.raises(DataError, match="finite and non-negative"):
        LogisticRegression().fit(np.eye(4), [0, 1, 0, 1], sample_weight=[1, -2, 3, 1])


def test_numpy_chunks_stay_on_the_host_where_a_worker_has_no_gpu(client, monkeypatch):
    """NumPy row blocks go to the GPUs only when every worker has one and this process
    can make CuPy's meta; otherwise the rows are passed on as they are."""
    import sys

    from mgpu_dask.parallel import inputs, workers

    Xd = da.from_array(np.ones((40, 3), np.float32), chunks=10)
    assert inputs.rows_on_gpus(Xd, None) is Xd
    if workers.detect_device(client) == "cpu":
        assert inputs.rows_on_gpus(Xd, client) is Xd
    monkeypatch.setattr(workers, "detect_device", lambda c: "gpu")
    monkeypatch.setitem(sys.modules, "cupy", None)  # GPU workers, but no CuPy here
    assert inputs.rows_on_gpus(Xd, client) is Xd


@pytest.mark.parametrize("d", [1, 4096])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int16])
def test_any_width_and_dtype_of_features_gives_scikit_learns_solution(d, dtype):
    """One feature to 4,096, any float or integer dtype: scikit-learn's solution on the
    same values (float16 and integers as they are stored; our evaluation is float32)."""
    X, y, _ = _problem(d, n=300, d=d)
    X = (X * 3).astype(dtype)
    C = 1.0 if d == 1 else 0.05  # 4,096 features over 300 rows: a penalty that binds
    ours = LogisticRegression(C=C, max_iter=2000, tol=1e-7).fit(X, y)
    sk = SklearnLR(C=C, max_iter=10_000, tol=1e-10).fit(X.astype(np.float64), y)
    _close(ours, sk, rtol=2e-3)
    assert (ours.predict(X) == sk.predict(X.astype(np.float64))).mean() >= 0.99
