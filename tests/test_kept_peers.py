"""A leader keeps the shards of other workers mapped between fits (``logreg.kept_peers``):
found again only for the same blocks on the same workers with the same labels, and let go
-- the device L-BFGS made for them, the mappings, the holders' exports -- when the
leader's rows go, when too much is kept, or when another fit's labels differ.  On a GPU,
two workers sharing it: later fits read the kept mappings and end at the first fit's
bits; a mapping is opened once per process however many read it."""

from __future__ import annotations

import contextlib
import time
import uuid

import numpy as np
import pytest

from mgpu_dask.logreg import joined, kept_peers
from mgpu_dask.parallel import kept_with_blocks
from mgpu_dask.logreg.problem import HeldLabels
from mgpu_dask.logreg.solvers import KeptFit


@pytest.fixture(autouse=True)
def store(monkeypatch):
    monkeypatch.setattr(kept_with_blocks, "_KEPT", type(kept_with_blocks._KEPT)())


@pytest.fixture
def sent(monkeypatch):
    """The releases a dropped mapping asks of its holders: (address, function, token)."""
    calls = []
    monkeypatch.setattr(kept_peers.direct, "from_worker",
                        lambda address, function, token, worker=None:
                        calls.append((address, function.__name__, token)))
    return calls


class _Worker:
    def __init__(self, keys):
        self.data = {key: None for key in keys}


class _Backend:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def _shards(block, labels=None, held=("b",), address="tcp://w2", keep=True):
    labels = np.array([0, 1, 1], np.uint8) if labels is None else labels
    return [{"own rows": [block], "own keys": ["a"], "labels": labels, "token": "t"},
            {"address": address, "keys": list(held), "labels": HeldLabels(["lb"]),
             "keep": keep, "token": "t"}]


def _mapped(shards, closed, backend=None):
    """A kept mapping of ``shards`` whose mappings append "closed" to ``closed``; with a
    device L-BFGS kept where the leader would keep it."""
    stack = contextlib.ExitStack()
    stack.callback(closed.append, "closed")
    fit_under = joined.fit_key(shards, True, 0.5)
    if backend is not None:
        kept_with_blocks.keep(*fit_under, KeptFit(("fingerprint",), backend))
    return kept_peers.Mapped([("X", "codes")], stack, [s["labels"] for s in shards], None,
                             None, [("tcp://w2", "t")], object(), fit_under)


def test_kept_mappings_serve_the_same_blocks_workers_and_labels(sent):
    block, closed = np.zeros(3), []
    shards = _shards(block)
    mapped = _mapped(shards, closed)
    kept_peers.keep(shards, True, 0.5, mapped, _Worker(["a"]))
    misses = [
        (_shards(block), False, 0.5, False),                   # exported otherwise
        (_shards(block), True, 0.25, False),                   # another scale
        (_shards(np.zeros(3)), True, 0.5, False),              # another own block
        (_shards(block, held=("c",)), True, 0.5, False),       # other blocks there
        (_shards(block, address="tcp://w3"), True, 0.5, False),  # held elsewhere now
        (_shards(block, keep=False), True, 0.5, False),        # nothing kept there
    ]
    for args in misses:
        assert kept_peers.taken(*args) is None, args[1:]
    assert not closed and not sent
    assert kept_peers.taken(_shards(block), True, 0.5, False) is mapped
    assert kept_peers.taken(_shards(block), True, 0.5, False) is None  # taken out for the fit
    kept_peers.keep(_shards(block), True, 0.5, mapped, _Worker(["a"]))
    assert kept_peers.taken(_shards(block), True, 0.5, False) is mapped
    assert not closed and not sent


def test_other_labels_let_the_kept_mapping_go(sent):
    block, closed, backend = np.zeros(3), [], _Backend()
    shards = _shards(block)
    kept_peers.keep(shards, True, 0.5, _mapped(shards, closed, backend), _Worker(["a"]))
    other = _shards(block, labels=np.array([1, 1, 0], np.uint8))
    assert kept_peers.taken(other, True, 0.5, False) is None
    assert closed == ["closed"] and backend.closed
    assert sent == [("tcp://w2", "release", "t")]
    assert kept_with_blocks.kept() == 0
    assert kept_peers.taken(shards, True, 0.5, False) is None


@pytest.mark.parametrize("how", ["rows released", "too many kept", "worker closing"])
def test_a_kept_mapping_goes_with_the_leaders_rows(how, sent, monkeypatch):
    block, closed, backend = np.zeros(3), [], _Backend()
    shards = _shards(block)
    kept_peers.keep(shards, True, 0.5, _mapped(shards, closed, backend), _Worker(["a"]))
    assert kept_with_blocks.kept() == 2  # the mapping and its device L-BFGS
    if how == "rows released":
        kept_with_blocks.ReleaseKept().transition("a", "memory", "released")
    elif how == "too many kept":
        monkeypatch.setattr(kept_with_blocks, "KEPT", 1)  # the oldest go first: both
        kept_with_blocks.kept_or_made([np.ones(1)], ["z"], None, object)
    else:
        kept_with_blocks.ReleaseKept().teardown(None)
    assert closed == ["closed"] and backend.closed
    assert sent == [("tcp://w2", "release", "t")]


def test_a_mapping_whose_rows_left_meanwhile_is_not_kept(sent):
    block, closed = np.zeros(3), []
    shards = _shards(block)
    kept_peers.keep(shards, True, 0.5, _mapped(shards, closed), _Worker([]))
    assert closed == ["closed"] and sent == [("tcp://w2", "release", "t")]
    assert kept_with_blocks.kept() == 0
    unnamed = _shards(block, keep=False)  # the holder keeps nothing: neither does the leader
    kept_peers.keep(unnamed, True, 0.5, _mapped(unnamed, closed), _Worker(["a"]))
    assert closed == ["closed"] * 2 and kept_with_blocks.kept() == 0


# -- on a GPU, two workers sharing it -------------------------------------------------------

def _no_joins():
    """Shards that share the leader's GPU are mapped as other GPUs' are (not joined)."""
    joined.JOIN_BYTES = 0


def _held_here():
    from mgpu_dask.parallel import peer_views

    return {"kept": kept_with_blocks.kept(), "exports": peer_views.exported(),
            "mapped": peer_views.mapped()}


def _export(token, dask_worker=None):
    import cupy

    from mgpu_dask.parallel import peer_views

    rows = cupy.arange(1000, dtype=cupy.float32)
    return peer_views.export(token, [[rows]])


def _open_twice(desc, dask_worker=None):
    from mgpu_dask.parallel import peer_views

    with peer_views.opened([desc]) as first:
        with peer_views.opened([desc]) as second:
            both = (float(first[0][0].sum()), float(second[0][0].sum()), peer_views.mapped())
        after_one = (float(first[0][0].sum()), peer_views.mapped())
        first.clear()
    return both, after_one, peer_views.mapped()


@pytest.fixture(scope="module")
def digits():
    from mgpu_dask.data import load_dataset
    from mgpu_dask.data import split as split_rows

    ds = load_dataset("digits")
    X = (ds.X.astype(np.float32) * (255 / 16)).round().astype(np.uint8)
    return split_rows(X, ds.y, seed=2)


@pytest.mark.gpu
@pytest.mark.slow
def test_other_workers_shards_stay_mapped_between_fits(digits):
    from distributed import Client
    from shared_gpu import shared_gpu_cluster

    from mgpu_dask.data import shard
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.parallel import peer_views

    with shared_gpu_cluster(2) as address, Client(address) as client, client.as_current():
        workers = sorted(client.scheduler_info()["workers"])
        token = uuid.uuid4().hex
        desc = client.run(_export, token, workers=[workers[0]])[workers[0]]
        both, after_one, after = client.run(_open_twice, desc, workers=[workers[1]])[workers[1]]
        assert both == (499500.0, 499500.0, 1) and after_one == (499500.0, 1) and after == 0
        client.run(peer_views.release, token, workers=[workers[0]])

        client.run(_no_joins)
        X = shard(digits.X_train, client)
        y = shard(digits.y_train, client, like=X)

        fits = [LogisticRegression(C=0.1, input_scale=1 / 255, max_iter=500, tol=1e-4,
                                   optimizer="device", precision="int8").fit(X, y)
                for _ in range(3)]
        profiles = [f.fit_profile_ for f in fits]
        assert [p["mapped kept"] for p in profiles] == [False, True, True], profiles
        assert [p["state kept"] for p in profiles] == [False, True, True], profiles
        assert all("waiting for the holders" not in p for p in profiles[1:])
        for f in fits[1:]:  # the same rows, the same L-BFGS: the same bits
            assert f.loss_ == fits[0].loss_ and f.n_iter_ == fits[0].n_iter_
            np.testing.assert_array_equal(f.coef_, fits[0].coef_)
        assert all(p["shards joined"] == 0 and p["shards"] == 2 for p in profiles)
        np.testing.assert_array_equal(fits[-1].predict(digits.X_test),
                                      fits[0].predict(digits.X_test))
        held = client.run(_held_here)
        assert sum(h["exports"] for h in held.values()) == 1      # the holder's, kept
        assert sorted(h["mapped"] for h in held.values()) == [0, 2]  # rows and labels
        del X, y, fits
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            held = client.run(_held_here)
            if not any(v for h in held.values() for v in h.values()):
                break
            time.sleep(0.1)
        assert not any(v for h in held.values() for v in h.values()), held
