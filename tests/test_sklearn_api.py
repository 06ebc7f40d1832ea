"""Our estimators as scikit-learn estimators: checks, tools, types in and out, travel."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from conftest import digits_xy
from sklearn.base import clone, is_classifier
from sklearn.linear_model import LogisticRegression as SkLR
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.neighbors import KNeighborsClassifier as SkKNN
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from mgpu_dask.exceptions import MgpuDaskError
from mgpu_dask.parallel.inputs import NotFittedError
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.logreg import LogisticRegression

README = Path(__file__).resolve().parents[1] / "README.md"


def _expected_failures(estimator):
    if isinstance(estimator, LogisticRegression):
        return {"check_sample_weight_equivalence_on_dense_data":
                "float32 evaluations: weights and repeated rows fit alike to float32's "
                "precision (4e-6 here), not to the check's 1e-7"}
    return {}


@parametrize_with_checks([KNeighborsClassifier(), LogisticRegression()],
                         expected_failed_checks=_expected_failures)
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def _blobs(n=600, d=8, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 4, (classes, d))
    y = rng.integers(0, classes, n)
    return centers[y] + rng.normal(0, 1.5, (n, d)), y


def test_clone_and_classifier_tags():
    for est in (KNeighborsClassifier(5, weights="uniform"), LogisticRegression(C=0.5)):
        twin = clone(est)
        assert twin is not est and twin.get_params() == est.get_params()
        assert is_classifier(est)
    with pytest.raises(NotFittedError):
        KNeighborsClassifier().predict(np.zeros((1, 2)))


def test_pipeline_grid_search_matches_scikit_learn():
    X, y = digits_xy()
    grid = {"kneighborsclassifier__n_neighbors": [1, 3, 5]}
    ours = GridSearchCV(make_pipeline(StandardScaler(), KNeighborsClassifier()), grid, cv=3)
    theirs = GridSearchCV(make_pipeline(StandardScaler(), SkKNN(weights="distance")), grid, cv=3)
    ours.fit(X[:1200], y[:1200])
    theirs.fit(X[:1200], y[:1200])
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"],
                               theirs.cv_results_["mean_test_score"], atol=0.005)
    assert abs(ours.score(X[1200:], y[1200:]) - theirs.score(X[1200:], y[1200:])) < 0.005


@pytest.mark.parametrize("C", [0.05, 1.0])
def test_cross_val_score_of_logistic_regression_over_C(C):
    X, y = digits_xy()
    X = X / 16.0
    ours = cross_val_score(LogisticRegression(C=C, max_iter=300), X, y, cv=3)
    theirs = cross_val_score(SkLR(C=C, max_iter=300), X, y, cv=3)
    assert ours.mean() > 0.85
    np.testing.assert_allclose(ours, theirs, atol=0.01)


@pytest.mark.parametrize("Est", [KNeighborsClassifier, LogisticRegression])
def test_type_in_type_out_and_string_labels(Est, client):
    X, y = _blobs()
    names = np.array(["ant", "bee", "cat", "dog"])[y]
    clf = Est().fit(X[:400], names[:400])
    out = clf.predict(X[400:])
    assert isinstance(out, np.ndarray) and set(out) <= set(names)
    assert (out == names[400:]).mean() > 0.9
    lazy = clf.predict(da.from_array(X[400:], chunks=(100, -1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), out)
    proba = clf.predict_proba(X[400:])
    assert isinstance(proba, np.ndarray) and proba.shape == (200, 4)
    assert isinstance(clf.score(X[400:], names[400:]), float)


def test_knn_pickles_home_and_serves_without_a_cluster():
    from distributed import Client, LocalCluster

    X, y = _blobs()
    with LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as c, c.as_current():
        Xd = c.persist(da.from_array(X[:400], chunks=(200, -1)))
        clf = KNeighborsClassifier(3).fit(Xd, y[:400])
        expected = clf.predict(X[400:])
        blob = pickle.dumps(clf)              # rows come home while the cluster runs
        stranded = KNeighborsClassifier(3).fit(Xd, y[:400])
    served = pickle.loads(blob)
    np.testing.assert_array_equal(served.predict(X[400:]), expected)
    with pytest.raises(MgpuDaskError, match="cluster that has closed; pickle or convert"):
        pickle.dumps(stranded)


def test_knn_to_and_from_scikit_learn():
    X, y = _blobs(seed=1)
    ours = KNeighborsClassifier(5).fit(X[:400], y[:400])
    sk = ours.to_sklearn()
    np.testing.assert_array_equal(sk.predict(X[400:]), ours.predict(X[400:]))
    back = KNeighborsClassifier.from_sklearn(SkKNN(3, weights="distance").fit(X[:400], y[:400]))
    np.testing.assert_array_equal(back.predict(X[400:]),
                                  SkKNN(3, weights="distance").fit(X[:400], y[:400]).predict(X[400:]))
    with pytest.raises(ValueError, match="euclidean, sqeuclidean and cosine distances run here"):
        KNeighborsClassifier.from_sklearn(SkKNN(metric="manhattan").fit(X, y))


def test_knn_differs_from_scikit_learn_only_on_exact_ties():
    X, y = digits_xy()  # small integers: equal distances happen
    ours = KNeighborsClassifier(3).fit(X[:1200], y[:1200])
    sk = ours.to_sklearn()
    differ = np.nonzero(ours.predict(X[1200:]) != sk.predict(X[1200:]))[0]
    assert len(differ) <= 3
    for row in differ:  # the same neighbour distances: a tie broken another way
        q = X[1200 + row][None]
        np.testing.assert_allclose(ours.kneighbors(q)[0], sk.kneighbors(q)[0])


@pytest.mark.parametrize("classes", [10, 2])
def test_logistic_regression_to_and_from_scikit_learn(classes):
    X, y = digits_xy()
    keep = y < classes
    X, y = X[keep] / 16.0, y[keep]
    ours = LogisticRegression(C=1.0).fit(X[:-100], y[:-100])
    sk = ours.to_sklearn()
    np.testing.assert_array_equal(sk.predict(X[-100:]), ours.predict(X[-100:]))
    np.testing.assert_allclose(sk.predict_proba(X[-100:]), ours.predict_proba(X[-100:]),
                               rtol=1e-4, atol=1e-6)
    if classes > 2:
        np.testing.assert_allclose(sk.coef_, ours.coef_)
    theirs = SkLR(C=1.0).fit(X[:-100], y[:-100])
    back = LogisticRegression.from_sklearn(theirs)
    np.testing.assert_array_equal(back.predict(X[-100:]), theirs.predict(X[-100:]))
    blob = pickle.loads(pickle.dumps(back))
    np.testing.assert_array_equal(blob.predict(X[-100:]), theirs.predict(X[-100:]))


def test_readme_pipeline_example_runs_as_written():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "GridSearchCV" in b)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["search"].best_score_ > 0.9
    assert isinstance(namespace["sklearn_model"], SkKNN)



@pytest.mark.parametrize("Est", [KNeighborsClassifier, LogisticRegression])
def test_arrays_in_one_block_are_not_hashed_without_a_client(Est, monkeypatch):
    """A user's array in one block gets no content name: Dask hashes a CuPy array by
    pickling it through the host (0.45 s for 512 MB in a fit)."""
    import dask.array.core as core

    hashed, real = [], core.tokenize

    def spy(*args, **kwargs):
        hashed.extend(a.shape for a in args if isinstance(a, np.ndarray) and a.ndim == 2)
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "tokenize", spy)
    X, y = digits_xy()
    X, y = X[:300].astype(np.float32), y[:300]
    model = Est().fit(X, y)
    assert np.mean(model.predict(X) == y) > 0.9
    assert hashed == []
