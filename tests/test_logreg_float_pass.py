"""The float32 evaluation in one pass over the rows (``kernels/logreg/cuda_float``), in
Numba's CUDA simulator: its loss and gradients against float64 NumPy, in every layout
its constants allow (one feature to :data:`MAX_FEATURES`, two classes to
:data:`MAX_CLASSES`, partial tiles, blocks walking several tiles, weighted rows), and
the same bits from one evaluation to the next."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import softmax_reference
from numba import config

from mgpu_dask.kernels.logreg import cuda_float as F

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                                reason="CUDA kernels run here only under the simulator")


def _evaluate(X, y, params, k, w, blocks):
    from mgpu_dask.kernels.launch import launch

    n, d = X.shape
    grad_parts = np.full(blocks * d * k, np.nan, dtype=np.float32)
    sum_parts = np.full(blocks * (k + 1), np.nan, dtype=np.float64)
    weighted = w is not None
    weights = w if weighted else np.ones(1, np.float32)
    launch(F.xent_grad_tiles, blocks, F.THREADS, X.ravel(), d, y, params, k, weights,
           int(weighted), grad_parts, sum_parts)
    grad = np.full(d * k, np.nan, dtype=np.float32)
    sums = np.full(k + 1, np.nan, dtype=np.float64)
    outputs = d * k + k + 1
    launch(F.sum_block_parts, -(-outputs // 128), 128, grad_parts, sum_parts, blocks, d * k, k,
           grad, sums)
    return grad.reshape(d, k), sums


def _reference(X, y, params, k, w):
    d = X.shape[1]
    W = params[: d * k].astype(np.float64).reshape(d, k)
    resid, loss = softmax_reference(X.astype(np.float64) @ W + params[d * k:], y)
    if w is not None:
        resid, loss = resid * w[:, None], loss * w
    return X.astype(np.float64).T @ resid, resid.sum(axis=0), loss.sum()


@pytest.mark.parametrize("n, d, k, weighted, blocks", [
    (45, 37, 4, False, 1),       # one partial tile
    (200, 96, 10, True, 2),      # two blocks, each walking tiles in turn; weighted rows
    (130, 1, 2, False, 3),       # one feature, two classes; a block with one row's tile
    (70, 96, 16, True, 1),       # the widest rows and the most classes
    (64, 5, 9, False, 4),        # one full tile, blocks with no tile at all
])
def test_one_pass_against_float64(n, d, k, weighted, blocks):
    rng = np.random.default_rng(n + d + k)
    X = (rng.standard_normal((n, d)) * 2).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    params = (rng.standard_normal(d * k + k) * 0.3).astype(np.float32)
    w = rng.uniform(0.1, 3.0, n).astype(np.float32) if weighted else None
    grad, sums = _evaluate(X, y, params, k, w, blocks)
    want_grad, want_b, want_loss = _reference(X, y, params, k, w)
    scale = np.abs(X).sum() / d  # float32 sums over the rows
    np.testing.assert_allclose(grad, want_grad, atol=1e-5 * scale)
    np.testing.assert_allclose(sums[:k], want_b, atol=1e-5 * n)
    np.testing.assert_allclose(sums[k], want_loss, rtol=1e-5)


def test_the_same_bits_each_evaluation():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((150, 20)).astype(np.float32)
    y = rng.integers(0, 6, 150).astype(np.int32)
    params = (rng.standard_normal(20 * 6 + 6) * 0.3).astype(np.float32)
    first = _evaluate(X, y, params, 6, None, 2)
    again = _evaluate(X, y, params, 6, None, 2)
    assert first[0].tobytes() == again[0].tobytes() and first[1].tobytes() == again[1].tobytes()


@pytest.mark.parametrize("n, d, k, runs", [(F.ONE_PASS_FROM, 1, 2, True),
                                            (10_000_000, 96, 16, True),
                                            (10_000_000, 96, 10, True),
                                            (F.ONE_PASS_FROM - 1, 96, 10, False),
                                            (10_000_000, 97, 10, False),
                                            (10_000_000, 32, 17, False),
                                            (10_000_000, 10, 1, False)])
def test_which_shards_evaluate_in_one_pass(n, d, k, runs):
    assert F.usable(n, d, k) is runs
    assert F.fits(d, k) is (runs or n < F.ONE_PASS_FROM)


def test_the_layout_takes_a_block_a_tile_up_to_its_blocks_an_sm():
    assert F.layout(1, 132) == 1
    assert F.layout(F.TILE * 10 + 1, 132) == 11
    assert F.layout(10_000_000, 132) == F.BLOCKS_PER_SM * 132

