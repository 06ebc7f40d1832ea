"""KNN kernels against a float64 NumPy reference, on fresh random data each run.

The CPU kernels run at moderate sizes; the CUDA kernels run on tiny inputs in
Numba's CUDA simulator (tests/conftest.py enables it where no GPU exists).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from mgpu_dask.kernels import knn as K

TARGETS = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator"))]


def _data(m, n, d, rng, levels=256):
    Q = rng.integers(0, levels, (m, d)).astype(np.float32)
    T = rng.integers(0, levels, (n, d)).astype(np.float32)
    return Q, T


def _exact(Q, T):
    return ((Q[:, None, :].astype(np.float64) - T[None].astype(np.float64)) ** 2).sum(-1)


def _size(target):
    return (5, 19, 16) if target == "cuda" else (120, 700, 48)


@pytest.mark.parametrize("target", TARGETS)
def test_sqdist_is_exact_for_integer_data(target):
    m, n, d = _size(target)
    Q, T = _data(m, n, d, np.random.default_rng())
    np.testing.assert_array_equal(K.sqdist(Q, T, target=target), _exact(Q, T))


@pytest.mark.parametrize("target", TARGETS)
def test_topk_matches_stable_argsort(target):
    rng = np.random.default_rng()
    m, n, _ = _size(target)
    D = rng.integers(0, 50, (m, n)).astype(np.float32)  # many ties: smaller column must win
    beta = rng.integers(0, 5, n).astype(np.float32)
    values, cols = K.topk(D, 4, alpha=-2.0, beta=beta, target=target)
    score = -2.0 * D.astype(np.float64) + beta
    order = np.argsort(score, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(cols, order)
    np.testing.assert_array_equal(values, np.take_along_axis(score, order, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("method", ["gemm", "direct"])
def test_local_candidates_exact_neighbours(target, method):
    rng = np.random.default_rng()
    m, n, d = _size(target)
    Q, T = _data(m, n, d, rng)
    labels = rng.integers(0, 10, n).astype(np.int32)
    index = np.arange(n, dtype=np.int64) + 1000
    k = 3
    cand = K.local_candidates(Q, T, labels, index, k, method=method, margin=2,
                              block_bytes=4 * n * 2, target=target)  # 2 query rows per slice
    ref = _exact(Q, T)
    order = np.argsort(ref, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(cand[..., 1], order + 1000)
    np.testing.assert_array_equal(cand[..., 0], np.take_along_axis(ref, order, 1))
    np.testing.assert_array_equal(cand[..., 2], labels[order])


def test_fewer_training_rows_than_k_are_padded():
    rng = np.random.default_rng()
    Q, T = _data(4, 2, 8, rng)
    cand = K.local_candidates(Q, T, np.array([1, 2], np.int32), np.arange(2), 3)
    assert np.isinf(cand[:, 2, 0]).all() and (cand[:, 2, 1] == -1).all()
    assert set(cand[:, :2, 1].ravel()) == {0.0, 1.0}


@pytest.mark.parametrize("target", TARGETS)
def test_merge_of_disjoint_shards_equals_whole(target):
    rng = np.random.default_rng()
    m, n, d = _size(target)
    Q, T = _data(m, n, d, rng)
    labels = rng.integers(0, 10, n).astype(np.int32)
    index = np.arange(n, dtype=np.int64)
    half = n // 2
    a = K.local_candidates(Q, T[:half], labels[:half], index[:half], 3, target="cpu")
    b = K.local_candidates(Q, T[half:], labels[half:], index[half:], 3, target="cpu")
    whole = K.local_candidates(Q, T, labels, index, 3, target="cpu")
    np.testing.assert_array_equal(K.merge(a, b, target=target), whole)
    np.testing.assert_array_equal(K.merge(b, a, target=target), whole)


def _reference_vote(cand, n_classes, weights):
    proba = np.zeros((len(cand), n_classes))
    for r, row in enumerate(cand):
        d = np.sqrt(row[:, 0])
        if weights == "uniform":
            w = np.ones(len(d))
        elif (d == 0).any():
            w = (d == 0).astype(float)
        else:
            w = 1.0 / d
        np.add.at(proba[r], row[:, 2].astype(int), w)
        proba[r] /= w.sum()
    return proba, proba.argmax(1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("weights", ["distance", "uniform"])
def test_vote_matches_reference(target, weights):
    rng = np.random.default_rng()
    m = 6 if target == "cuda" else 300
    cand = np.empty((m, 5, 3))
    cand[..., 0] = np.sort(rng.integers(0, 30, (m, 5)), axis=1)  # exact matches and ties
    cand[..., 1] = rng.permutation(m * 5).reshape(m, 5)
    cand[..., 2] = rng.integers(0, 4, (m, 5))
    proba, pred = K.vote(cand, 4, weights, target=target)
    ref_proba, ref_pred = _reference_vote(cand, 4, weights)
    np.testing.assert_allclose(proba, ref_proba, rtol=1e-12)
    np.testing.assert_array_equal(pred, ref_pred)


def test_bad_arguments():
    D = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="k=0"):
        K.topk(D, 0)
    with pytest.raises(ValueError, match="method"):
        K.local_candidates(D, D, np.zeros(2), np.arange(2), 1, method="fast")
    with pytest.raises(ValueError, match="weights"):
        K.vote(np.zeros((1, 1, 3)), 2, "cosine")
    with pytest.raises(ValueError, match="target"):
        K.sqdist(D, D, target="tpu")
