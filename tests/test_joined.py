"""Levels of several shards joined into one give the levels of the rows joined first
(NumPy here; the GPU test evaluates them), and a leader finds a join it kept only for
the same blocks, labels and classes."""

from __future__ import annotations

import numpy as np
import pytest

from mgpu_dask.kernels.logreg import Levels
from mgpu_dask.kernels.logreg import int8
from mgpu_dask.logreg import joined
from mgpu_dask.parallel import kept_with_blocks
from mgpu_dask.logreg.problem import HeldLabels


def _levels(X: np.ndarray, step: float) -> Levels:
    """What ``int8.levels`` makes of uint8 rows, in NumPy: shifted by 128, padded (with
    the transpose, which the join does not read)."""
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
        assert got.vt is None  # the evaluation that reads it makes it
        assert (got.step, got.n, got.d) == (0.5, sum(sizes), 21)


def test_levels_of_other_steps_or_widths_are_not_joined():
    X = np.zeros((4, 8), np.uint8)
    assert int8.joined([_levels(X, 0.5), _levels(X, 0.25)]) is None
    assert int8.joined([_levels(X, 0.5), _levels(np.zeros((4, 24), np.uint8), 0.5)]) is None


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setattr(kept_with_blocks, "_KEPT", type(kept_with_blocks._KEPT)())


def _shards(own, own_labels, held_keys=("b",), held_labels=("lb",), keep=True, token="t"):
    return [{"own rows": own, "own keys": ["a"], "labels": own_labels, "token": token},
            {"address": "tcp://w2", "keys": list(held_keys), "labels": HeldLabels(list(held_labels)),
             "keep": keep, "token": token}]


def test_a_join_is_found_for_the_same_blocks_labels_and_classes(store):
    block, labels, one = np.zeros(3), np.zeros(3), ("X", "y")
    joined.keep(_shards([block], [labels]), True, 0.5, one, None, None)
    assert joined.kept(_shards([block], [labels], token="u"), True, 0.5, False) == (one, None)
    misses = [
        (_shards([block], [labels]), False, 0.5, False),            # rows exported otherwise
        (_shards([block], [labels]), True, 0.25, False),            # another scale
        (_shards([np.zeros(3)], [labels]), True, 0.5, False),       # another own block
        (_shards([block], [np.zeros(3)]), True, 0.5, False),        # other own labels
        (_shards([block], [labels], held_keys=("c",)), True, 0.5, False),
        (_shards([block], [labels], held_labels=("lc",)), True, 0.5, False),
        (_shards([block], [labels], keep=False), True, 0.5, False),  # keys not kept there
        (_shards([block], [labels]), True, 0.5, True),              # classes to be found
        (_shards([block], [labels])[:1], True, 0.5, False),         # fewer shards
    ]
    for args in misses:
        assert joined.kept(*args) is None, args
    kept_with_blocks.ReleaseKept().transition("a", "memory", "released")  # the leader's rows go
    assert joined.kept(_shards([block], [labels]), True, 0.5, False) is None


def test_a_join_needs_the_same_sent_codes_and_the_same_classes(store):
    block, codes = np.zeros(3), np.array([0, 2, 1], np.uint8)
    shards = [{"own rows": [block], "own keys": ["a"], "labels": codes, "token": "t"}]
    classes = np.array([3, 5, 7])
    joined.keep(shards, True, None, ("X", "y"), [np.array([3, 5]), np.array([7])], classes)
    same = [{**shards[0], "labels": codes.copy()}]
    found = joined.kept(same, True, None, True)
    assert found is not None and found[1] is classes
    assert joined.kept(same, True, None, False) is None  # codes sent as class indices
    assert joined.kept(same, True, None, True, declared=[3, 5, 7]) is not None
    assert joined.kept(same, True, None, True, declared=[3, 5, 7, 9]) is None  # other codes
    assert joined.kept(same, True, None, True, declared=[3, 5]) is None        # 7 not declared
    other = [{**shards[0], "labels": np.array([0, 2, 2], np.uint8)}]
    assert joined.kept(other, True, None, True) is None
    wider = [{**shards[0], "labels": codes.astype(np.int32)}]
    assert joined.kept(wider, True, None, True) is None
