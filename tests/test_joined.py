"""Levels of several shards joined into one give the levels of the rows joined first
(NumPy here; the GPU test evaluates them)."""

from __future__ import annotations

import numpy as np

from mgpu_dask.kernels.logreg import Levels
from mgpu_dask.kernels.logreg import int8


def _levels(X: np.ndarray, step: float) -> Levels:
    """What ``int8.levels`` makes of uint8 rows, in NumPy: shifted by 128, padded."""
    n, d = X.shape
    rows, cols = int8.padded_shape(n, d)
    v = np.zeros((rows, cols), np.int8)
    v[:n, :d] = (X.astype(np.int16) - 128).astype(np.int8)
    return Levels(v, np.ascontiguousarray(v.T), step, n, d)


def test_joined_levels_are_the_levels_of_the_joined_rows():
    rng = np.random.default_rng(0)
    for sizes in ((5, 9), (16000, 300, 1000)):  # one block of rows; several blocks
        parts = [rng.integers(0, 256, (n, 21)).astype(np.uint8) for n in sizes]
        got = int8.joined([_levels(p, 0.5) for p in parts])
        want = _levels(np.concatenate(parts), 0.5)
        assert got.v.shape == want.v.shape and got.v.shape[0] % 16 == 0
        np.testing.assert_array_equal(got.v, want.v)
        np.testing.assert_array_equal(got.vt, want.vt)
        assert (got.step, got.n, got.d) == (0.5, sum(sizes), 21)


def test_levels_of_other_steps_or_widths_are_not_joined():
    X = np.zeros((4, 8), np.uint8)
    assert int8.joined([_levels(X, 0.5), _levels(X, 0.25)]) is None
    assert int8.joined([_levels(X, 0.5), _levels(np.zeros((4, 24), np.uint8), 0.5)]) is None
