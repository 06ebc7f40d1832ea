"""Row blocks spread over the GPUs before a sharded fit (``parallel/spread``): which runs
go where, and a user's blocks all on one worker searched on every worker."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from mgpu_dask.parallel import spread

TWO_GPUS = {"a": "h/0", "b": "h/1"}


def test_rows_spread_evenly_enough_stay_where_they_are():
    assert spread.balanced_runs([5, 5], ["a", "b"], ["a", "b"], TWO_GPUS) is None
    # 1.25 times an even share is within the tolerance; more is not
    assert spread.is_balanced([5, 3], ["a", "b"], ["a", "b"], TWO_GPUS)
    assert not spread.is_balanced([6, 3], ["a", "b"], ["a", "b"], TWO_GPUS)
    assert spread.balanced_runs([9, 1], ["a", "a"], ["a"], {"a": "h/0"}) is None  # one GPU


def test_blocks_on_one_of_two_gpus_are_cut_in_two_runs_one_moving():
    runs, targets = spread.balanced_runs([5, 5], ["a", "a"], ["a", "b"], TWO_GPUS)
    assert runs == [range(0, 1), range(1, 2)] and targets == ["a", "b"]
    # the run holding most rows in place keeps its GPU: here the second, on b
    runs, targets = spread.balanced_runs([2, 2, 2, 2], ["a", "b", "b", "b"], ["a", "b"],
                                         TWO_GPUS)
    assert runs == [range(0, 2), range(2, 4)] and targets == ["a", "b"]
    runs, targets = spread.balanced_runs([2, 2, 2, 2], ["b", "b", "b", "a"], ["a", "b"],
                                         TWO_GPUS)
    assert runs == [range(0, 2), range(2, 4)] and targets == ["b", "a"]


def test_workers_sharing_a_gpu_are_one_place():
    ids = {"a": "h/0", "a2": "h/0", "b": "h/1", "b2": "h/1"}
    workers = ["a", "a2", "b", "b2"]
    # evenly spread over the two GPUs, though not over the four workers: left as it is
    assert spread.balanced_runs([5, 5], ["a2", "b2"], workers, ids) is None
    runs, targets = spread.balanced_runs([4, 4, 4, 4], ["a", "a2", "a2", "a"], workers, ids)
    assert runs == [range(0, 2), range(2, 4)]
    # the run staying on GPU 0 goes to whichever of its workers holds most of it, ties
    # to the first named; the other to GPU 1's first worker
    assert targets[0] in ("a", "a2") and targets[1] == "b"
    # workers without a GPU are each a place of their own
    runs, targets = spread.balanced_runs([3, 3, 3], ["x", "x", "x"], ["x", "y", "z"], {})
    assert runs == [range(0, 1), range(1, 2), range(2, 3)] and sorted(targets) == ["x", "y", "z"]


def test_blocks_too_coarse_are_cut_finer_first():
    assert spread.needs_finer_blocks([10], 2)
    assert spread.needs_finer_blocks([8, 1, 1], 2)       # one block over a share and a quarter
    assert not spread.needs_finer_blocks([3, 3, 2, 2], 2)
    assert not spread.needs_finer_blocks([10], 1)
    assert spread.balanced_runs([10], ["a"], ["a", "b"], TWO_GPUS) is None  # rechunk first
    assert spread.finer_blocks([10], ["a"], ["a", "b"], TWO_GPUS) == 2
    assert spread.finer_blocks([5, 5], ["a", "a"], ["a", "b"], TWO_GPUS) is None  # runs do
    assert spread.finer_blocks([10], ["a"], ["a"], {"a": "h/0"}) is None  # one GPU


@pytest.mark.parametrize("blocks", [2, 1])
def test_a_users_blocks_on_one_worker_are_searched_on_both(client, blocks):
    """A dask array whose every block sits on one worker (as Dask may leave them): the
    shard plan puts a shard on each worker, moving or cutting the blocks, and finds
    the neighbours the replicate plan finds."""
    from distributed import wait

    from mgpu_dask import KNeighborsClassifier

    rng = np.random.default_rng(3)
    Xh = rng.standard_normal((400, 6)).astype(np.float32)
    y = rng.integers(0, 4, 400)
    Qh = rng.standard_normal((50, 6)).astype(np.float32)
    first = sorted(client.scheduler_info()["workers"])[0]
    X = client.persist(da.from_array(Xh, chunks=(400 // blocks, 6)), workers=[first])
    wait(X)
    assert {w for ws in client.who_has(X).values() for w in ws} == {first}
    clf = KNeighborsClassifier(3, plan="shard").fit(X, y)
    assert sorted(clf.layout_.workers) == sorted(client.scheduler_info()["workers"])
    got_d, got_i = clf.kneighbors(Qh)
    want_d, want_i = KNeighborsClassifier(3, plan="replicate").fit(Xh, y).kneighbors(Qh)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_d, want_d, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(clf.predict(Qh, on_host=True)),
                                  np.asarray(KNeighborsClassifier(3).fit(Xh, y).predict(
                                      Qh, on_host=True)))


def test_a_users_blocks_on_one_worker_are_fitted_on_both(client, monkeypatch):
    """Logistic regression on a dask array whose blocks all sit on one worker: each block
    of the other worker's run is copied there first (once: the next fit finds the copy),
    the fit reads the blocks on both, and the solution is the one of rows spread by us."""
    from distributed import wait

    from mgpu_dask import LogisticRegression
    from mgpu_dask.logreg import single_host

    rng = np.random.default_rng(5)
    Xh = rng.standard_normal((600, 5)).astype(np.float32)
    y = (Xh[:, 0] + 0.5 * Xh[:, 1] > 0).astype(np.int64) + (Xh[:, 2] > 1)
    workers = sorted(client.scheduler_info()["workers"])
    X = client.persist(da.from_array(Xh, chunks=(150, 5)), workers=[workers[0]])
    wait(X)
    seen = []
    real = single_host.fit_single_host

    def spy(X, rows, *args, **kwargs):
        seen.append(list(rows[1]))
        return real(X, rows, *args, **kwargs)

    monkeypatch.setattr(single_host, "fit_single_host", spy)
    fitted = LogisticRegression(C=1.0, max_iter=200, tol=1e-8).fit(X, y)
    assert sorted(set(seen[-1])) == workers and seen[-1] == sorted(seen[-1])
    kept = len(spread._MOVED)
    LogisticRegression(C=1.0, max_iter=200, tol=1e-8).fit(X, y)
    assert len(spread._MOVED) == kept and seen[-1] == seen[-2]  # the copies kept
    ours = LogisticRegression(C=1.0, max_iter=200, tol=1e-8).fit(Xh, y)
    np.testing.assert_allclose(fitted.coef_, ours.coef_, rtol=1e-4, atol=1e-5)


def test_blocks_spread_for_a_fit_stay_on_the_hosts_that_hold_them(client, monkeypatch):
    """A worker on another host is no place for a fit's blocks: the fit over one host's
    shards maps them all in one process, which a block sent away would undo."""
    from distributed import wait

    from mgpu_dask.parallel import workers as workers_mod

    real = sorted(client.scheduler_info()["workers"])
    facts = dict(workers_mod.fixed_facts(client))
    elsewhere = "tcp://10.9.9.9:4321"
    monkeypatch.setattr(workers_mod, "fixed_facts",
                        lambda c: {**facts, elsewhere: next(iter(facts.values()))})
    X = client.persist(da.from_array(np.ones((600, 3), np.float32), chunks=(150, 3)),
                       workers=[real[0]])
    wait(X)
    futures, targets = spread.located(client, X)
    assert targets == [real[0], real[0], real[1], real[1]]
    assert [f.status for f in futures] == ["finished"] * 4
