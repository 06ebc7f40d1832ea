"""The project's protocol: seeded shuffle and split, then a size ``fraction``.

Train and test files are combined (70k for MNIST), shuffled with ``seed`` and
split with ``test_size`` (MNIST: 52,500 train, 17,500 test).  ``fraction``
then resizes both parts the same way: F < 1 keeps the first ``round(F * n)``
rows of each (already shuffled, so a random subset), F > 1 repeats the rows
(``fraction=4`` gives 210,000 x 70,000 for MNIST).  Resizing after the split
keeps every test row out of the training set, replicated or not.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..exceptions import DataError


class Split(NamedTuple):
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    train_index: np.ndarray | None = None   # the data set's row behind each training row
    test_index: np.ndarray | None = None    # ... and behind each test row


def resize(array: np.ndarray, fraction: float) -> np.ndarray:
    """Keep a prefix (``fraction < 1``) or repeat the rows (``fraction > 1``)."""
    n_rows = max(1, int(round(fraction * len(array))))
    if n_rows <= len(array):
        return array[:n_rows]
    repeats = -(-n_rows // len(array))
    return np.concatenate([array] * repeats)[:n_rows]


def split(X: np.ndarray, y: np.ndarray, *, test_size: float = 0.25, seed: int = 0,
          fraction: float = 1.0) -> Split:
    """Shuffle, split and resize a data set following the project's protocol.

    Parameters
    ----------
    X : numpy.ndarray of shape (n_samples, n_features)
    y : numpy.ndarray of shape (n_samples,)
    test_size : float, default 0.25
        Share of the rows held out for testing, in (0, 1).
    seed : int, default 0
        Seed of the shuffle.
    fraction : float, default 1.0
        Size factor applied to both parts after the split; must be > 0.

    Returns
    -------
    Split
        ``X_train, y_train, X_test, y_test``.
    """
    if not 0.0 < test_size < 1.0:
        raise DataError(f"--test-size {test_size} must be between 0 and 1 (e.g. 0.25)")
    if not fraction > 0.0 or not np.isfinite(fraction):
        raise DataError(f"--fraction {fraction} must be a positive number (0.5 halves, 4 replicates)")
    if len(X) != len(y):
        raise DataError(f"{len(X)} rows of features but {len(y)} labels")
    n_test = int(round(test_size * len(X)))
    if n_test < 1 or n_test >= len(X):
        raise DataError(f"--test-size {test_size} leaves no rows for train or test out of {len(X)}")
    order = np.random.default_rng(seed).permutation(len(X))
    test, train = order[:n_test], order[n_test:]
    return Split(resize(X[train], fraction), resize(y[train], fraction),
                 resize(X[test], fraction), resize(y[test], fraction),
                 resize(train, fraction), resize(test, fraction))


def keep_labels(parts: Split, labels: list[int]) -> Split:
    """Only the rows whose label is one of ``labels``, in train and test (indices kept)."""
    wanted = sorted(set(int(v) for v in labels))
    present = set(np.unique(parts.y_train).tolist())
    missing = [v for v in wanted if v not in present]
    if len(wanted) < 2:
        raise DataError(f"--classes {','.join(map(str, labels))}: give at least two labels "
                        "(e.g. 3,8)")
    if missing:
        raise DataError(f"--classes: label(s) {missing} do not occur in the training part; "
                        f"its labels are {sorted(present)}")
    train, test = np.isin(parts.y_train, wanted), np.isin(parts.y_test, wanted)

    def pick(array: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
        return None if array is None else array[mask]

    return Split(parts.X_train[train], parts.y_train[train], parts.X_test[test],
                 parts.y_test[test], pick(parts.train_index, train), pick(parts.test_index, test))
