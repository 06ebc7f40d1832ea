from __future__ import annotations

import numpy as np
import pytest

from mgpu_dask.data import split
from mgpu_dask.data.split import resize
from mgpu_dask.exceptions import DataError


def _data(n=1000):
    X = np.arange(n * 3).reshape(n, 3)
    return X, X[:, 0] // 3 % 10


def test_protocol_sizes_and_disjoint():
    X, y = _data(70000)
    s = split(X, y, test_size=0.25, seed=0)
    assert (len(s.X_train), len(s.X_test)) == (52500, 17500)
    train_ids, test_ids = set(s.X_train[:, 0]), set(s.X_test[:, 0])
    assert not train_ids & test_ids and len(train_ids | test_ids) == 70000
    np.testing.assert_array_equal(s.y_train, s.X_train[:, 0] // 3 % 10)


def test_seed_changes_the_split_deterministically():
    X, y = _data()
    a, b, c = (split(X, y, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert not np.array_equal(a.X_test, c.X_test)


@pytest.mark.parametrize("fraction, train, test", [(4, 3000, 1000), (0.25, 188, 62), (1.5, 1125, 375)])
def test_fraction_resizes_both_parts(fraction, train, test):
    X, y = _data()
    s = split(X, y, fraction=fraction)
    assert (len(s.X_train), len(s.X_test)) == (train, test)
    assert not set(s.X_train[:, 0]) & set(s.X_test[:, 0])
    np.testing.assert_array_equal(s.y_train, s.X_train[:, 0] // 3 % 10)


def test_replication_repeats_rows_in_order():
    a = np.arange(4)
    np.testing.assert_array_equal(resize(a, 2.5), [0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(resize(a, 0.5), [0, 1])


@pytest.mark.parametrize("kwargs, match", [
    ({"test_size": 0.0}, "between 0 and 1"), ({"test_size": 1.5}, "between 0 and 1"),
    ({"fraction": 0}, "positive"), ({"fraction": float("nan")}, "positive"),
    ({"test_size": 0.0001}, "leaves no rows"),
])
def test_bad_arguments(kwargs, match):
    X, y = _data(100)
    with pytest.raises(DataError, match=match):
        split(X, y, **kwargs)


def test_length_mismatch():
    with pytest.raises(DataError, match="labels"):
        split(np.zeros((5, 2)), np.zeros(4))
