"""Class labels: found and encoded on the client or where they live (mgpu_dask.parallel.labels), and
logistic regression on labels persisted beside their rows, which never reach the client."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import digits_xy, exports_held

from mgpu_dask.parallel import inputs, labels
from mgpu_dask.data import shard, split
from mgpu_dask.exceptions import DataError
from mgpu_dask.parallel.inputs import to_host
from mgpu_dask.logreg import LogisticRegression


def _samples(rng):
    yield rng.integers(0, 10, 5000).astype(np.uint8)             # digits: counted per value
    yield rng.integers(0, 300, 5000).astype(np.uint16)           # counted by bincount
    yield rng.choice([3, 8, 11], 777).astype(np.int32)           # a table lookup
    yield rng.integers(-5, 5, 600)                               # negative: sorted
    yield rng.integers(0, 1 << 40, 300)                          # large: sorted
    yield rng.choice(np.array(["cat", "dog", "emu"]), 50)        # strings
    yield rng.random(40) < 0.5                                   # booleans


def test_present_and_codes_are_uniques_and_their_indices():
    rng = np.random.default_rng()
    for y in _samples(rng):
        classes = labels.classes_from([labels.present(y[: len(y) // 3]),
                                       labels.present(y[len(y) // 3:])])
        np.testing.assert_array_equal(classes, np.unique(y))
        assert classes.dtype == y.dtype
        codes = labels.codes(y, classes)
        assert codes.dtype == np.int32
        np.testing.assert_array_equal(classes[codes], y)
        got_classes, got_codes = inputs.encode_labels(y)
        np.testing.assert_array_equal(got_classes, classes)
        np.testing.assert_array_equal(got_codes, codes)


def test_declared_classes_index_the_labels_and_must_hold_them():
    y = np.array([2, 5, 5, 9], dtype=np.uint8)
    classes = labels.classes_from([labels.present(y)], declared=[9, 0, 2, 5])
    np.testing.assert_array_equal(classes, [0, 2, 5, 9])
    np.testing.assert_array_equal(labels.codes(y, classes), [1, 2, 2, 3])
    with pytest.raises(DataError, match=r"label\(s\) \[9\] are not among the declared classes"):
        labels.classes_from([labels.present(y)], declared=[2, 5])
    with pytest.raises(DataError, match="y holds 1 class"):
        labels.at_least_two(labels.classes_from([labels.present(y[1:3])]))


def _no_labels_on_the_client(monkeypatch, n):
    """Fail the test if the fit brings the labels (1-D, ``n`` of them) to the client."""
    real = inputs.to_host

    def refuse(array, timeout=None):
        assert getattr(array, "shape", None) != (n,), "the labels came to the client"
        return real(array, timeout)

    monkeypatch.setattr(inputs, "to_host", refuse)


@pytest.mark.parametrize("cluster", ["client", "process_client"])
def test_labels_beside_their_rows_fit_the_model_of_host_labels(cluster, request, monkeypatch):
    """Integer labels persisted beside their rows (``shard(y, like=X)``) are read where
    they live, their classes found by the fit's leader: the same model as the same labels
    sent from the client, labels 3 / 8 / 11 included (a table lookup on the workers)."""
    client = request.getfixturevalue(cluster)
    X, y = digits_xy()
    y = np.array([3, 8, 11])[y % 3].astype(np.int32)
    s = split(X, y, seed=1)
    rows = shard(s.X_train, client, dtype=np.float32, scale=1 / 16)
    kw = dict(C=0.5, max_iter=80, comm="single-host")
    ref = LogisticRegression(**kw).fit(rows, s.y_train)
    held = shard(s.y_train, client, like=rows)
    with monkeypatch.context() as patch:
        _no_labels_on_the_client(patch, len(s.y_train))
        ours = LogisticRegression(**kw).fit(rows, held)
    assert ours.comm_ == "single-host"
    np.testing.assert_array_equal(ours.classes_, [3, 8, 11])
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-7)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(to_host(ours.predict(s.X_test / 16)),
                                  to_host(ref.predict(s.X_test / 16)))
    assert set(client.run(exports_held).values()) == {0}, "exports not released"


def test_labels_placed_apart_from_their_rows_are_copied_beside_them_once(client, monkeypatch):
    """Label blocks that Dask put on other workers than their rows (chunked alike) are
    copied to the rows' holders, worker to worker, not brought to the client; the next fit
    of the same arrays finds the copies, and the model is that of labels sent beside."""
    from mgpu_dask.parallel import placement, spread

    X, y = digits_xy()
    workers = sorted(client.nthreads())
    rows = shard(X.astype(np.float32) / 16, client, workers=workers)
    apart = shard(y, client, workers=workers[::-1])
    assert rows.chunks[0] == apart.chunks[0]
    assert placement.locate(client, apart)[1] != placement.locate(client, rows)[1]
    ref = LogisticRegression(max_iter=40, comm="single-host").fit(rows, shard(y, client, like=rows))
    copies = []
    real = placement.submit_pinned

    def counted(*args, **kwargs):
        copies.append(kwargs["worker"])
        return real(*args, **kwargs)

    monkeypatch.setattr(placement, "submit_pinned", counted)
    _no_labels_on_the_client(monkeypatch, len(y))
    for _ in range(2):
        ours = LogisticRegression(max_iter=40, comm="single-host").fit(rows, apart)
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-7)
    assert sorted(copies) == workers  # each block copied once, to its rows' holder
    spread._MOVED.clear()
    assert set(client.run(exports_held).values()) == {0}, "exports not released"


def test_labels_beside_their_rows_when_the_fit_goes_by_actors(client, monkeypatch):
    """Shards that one worker cannot map (here: every export sees another host) fall back
    to the fit by actors, which finds the classes of the held labels in one round trip and
    encodes each block where it lives."""
    from mgpu_dask.parallel import peer_views

    X, y = digits_xy()
    rows = shard(X.astype(np.float32) / 16, client)
    ref = LogisticRegression(max_iter=40, comm="actors").fit(rows, y)
    hosts = (f"host-{i}" for i in itertools.count())
    monkeypatch.setattr(peer_views, "_hostname", lambda: next(hosts))
    _no_labels_on_the_client(monkeypatch, len(y))
    ours = LogisticRegression(max_iter=40).fit(rows, shard(y, client, like=rows))
    assert ours.comm_ == "actors" and "more than one host" in ours.comm_note_
    np.testing.assert_array_equal(ours.classes_, np.arange(10))
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-7)


def test_labels_beside_their_rows_are_checked_where_they_live(client):
    X, y = digits_xy()
    rows = shard(X.astype(np.float32), client)
    held = shard(y, client, like=rows)
    with pytest.raises(DataError, match=r"label\(s\) \[9\] are not among the declared"):
        LogisticRegression(classes=list(range(9)), max_iter=5).fit(rows, held)
    one = shard(np.full(len(y), 4, np.uint8), client, like=rows)
    with pytest.raises(DataError, match="y holds 1 class"):
        LogisticRegression(max_iter=5).fit(rows, one)
    assert set(client.run(exports_held).values()) == {0}, "exports not released"
