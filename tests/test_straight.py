"""Host predictions asked of their holders straight (``parallel.direct.run_held``).

A warm predict whose answer comes back to the client asks each worker holding a
query block for its predictions in one message, with no task; the answers come
back as an array already in hand.  These tests check that the straight path is
taken where it can be, that it answers exactly what the task path answers, and
that every way it can fail (a block moved, a worker gone, a call that raises)
ends in the task path or in the call's own error, never in a wrong answer.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from conftest import digits_xy
from distributed import futures_of, wait

from mgpu_dask.data import shard, split
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.logreg import LogisticRegression
from mgpu_dask.parallel import direct, placement
from mgpu_dask.parallel.inputs import to_host


@pytest.fixture(scope="module")
def parts():
    return split(*digits_xy(), seed=3)


@pytest.fixture
def straight_calls(monkeypatch):
    """Counts the straight asks and what each answered (None: fell back to tasks)."""
    seen: list = []
    real = placement.run_straight

    def counted(*args, **kwargs):
        answer = real(*args, **kwargs)
        seen.append(answer)
        return answer

    monkeypatch.setattr(placement, "run_straight", counted)
    return seen


def _no_straight(monkeypatch):
    monkeypatch.setattr(placement, "run_straight", lambda *a, **k: None)


def _estimators(parts, client):
    X = shard(parts.X_train, client, dtype=np.float32, scale=1 / 16)
    return {"knn": KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train),
            "logreg": LogisticRegression(max_iter=20).fit(X, parts.y_train)}


@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_host_predictions_come_straight_and_equal_the_task_path(task, client, parts,
                                                                straight_calls, monkeypatch):
    Q = shard(parts.X_test if task == "knn" else parts.X_test / 16, client, dtype=np.float32)
    clf = _estimators(parts, client)[task]
    straight = clf.predict(Q, on_host=True)
    assert len(straight_calls) == 1 and straight_calls[0] is not None
    assert placement.blocks_in_hand(straight) is not None  # nothing left to run
    got = to_host(straight)
    _no_straight(monkeypatch)
    tasks = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(tasks) is None
    np.testing.assert_array_equal(got, to_host(tasks))
    np.testing.assert_array_equal(got, straight.compute())  # a plain compute agrees
    assert (got == parts.y_test).mean() > 0.85


@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_several_blocks_per_worker_come_back_in_row_order(task, client, parts, straight_calls,
                                                          monkeypatch):
    X = parts.X_test if task == "knn" else parts.X_test / 16
    Q = client.persist(da.from_array(X.astype(np.float32), chunks=(37, -1)))
    wait(futures_of(Q))
    assert Q.numblocks[0] > 2 * len(client.scheduler_info()["workers"])
    clf = _estimators(parts, client)[task]
    got = to_host(clf.predict(Q, on_host=True))
    assert straight_calls and straight_calls[-1] is not None
    _no_straight(monkeypatch)
    np.testing.assert_array_equal(got, to_host(clf.predict(Q, on_host=True)))


def test_shard_plan_on_one_worker_comes_straight_and_equals_the_task_path(parts, straight_calls,
                                                                         monkeypatch):
    """One worker holding the query blocks and every training shard (deformed MNIST's rows
    are made there): its host predictions come straight, as the tasks' would be."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as one:
        with one.as_current():
            Q = one.persist(da.from_array(parts.X_test.astype(np.float32), chunks=(100, -1)))
            wait(futures_of(Q))
            clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
            straight = clf.predict(Q, on_host=True)
            assert straight_calls and straight_calls[-1] is not None
            assert placement.blocks_in_hand(straight) is not None
            got = to_host(straight)
            _no_straight(monkeypatch)
            tasks = clf.predict(Q, on_host=True)
            assert placement.blocks_in_hand(tasks) is None
            np.testing.assert_array_equal(got, to_host(tasks))
            # the worker refusing (its blocks moved on): the same predictions from tasks
            monkeypatch.undo()
            real = direct._answer_held  # what held calls run, over a lane or Dask's RPC

            def moved(calls, dask_worker):
                return {"refused": "moved", "message": "test"}

            monkeypatch.setattr(direct, "_answer_held", moved)
            refused = clf.predict(Q, on_host=True)
            assert placement.blocks_in_hand(refused) is None
            np.testing.assert_array_equal(to_host(refused), got)
            monkeypatch.setattr(direct, "_answer_held", real)
    assert (got == parts.y_test).mean() > 0.85


def _tasks_only():
    import dask

    return dask.config.set({"mgpu-dask.cluster.straight-predictions": False})


@pytest.mark.parametrize("mail", [True, False], ids=["worker-to-worker", "through-the-client"])
@pytest.mark.parametrize("rows", [None, 41], ids=["a-block-a-worker", "several-blocks"])
def test_shard_plan_over_two_workers_comes_straight_and_equals_the_task_path(
        rows, mail, client, parts, straight_calls, monkeypatch):
    """Every shard's holder searches every query block in one call, fetching the blocks it
    lacks from their holders, and each block's holder merges and votes (the others'
    candidates handed to it worker to worker, or through the client): the tasks'
    predictions, in row order, with no task."""
    from mgpu_dask.knn import straight as straight_paths

    monkeypatch.setattr(straight_paths, "MAIL", mail)
    if rows is None:
        Q = shard(parts.X_test, client, dtype=np.float32)
    else:
        Q = client.persist(da.from_array(parts.X_test.astype(np.float32), chunks=(rows, -1),
                                         name=False))  # keys of its own: none remembered
        wait(futures_of(Q))
    _, where = placement.locate(client, Q)
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    assert len(set(clf.layout_.workers)) == 2 and len(set(where)) == 2
    asks = []
    real_ask = placement.ask_straight
    monkeypatch.setattr(placement, "ask_straight", lambda *a, **k: asks.append(1) or real_ask(*a, **k))
    straight = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(straight) is not None
    # worker to worker: one ask of the shard holders; through the client: a second one
    assert len(asks) == (1 if mail else 2) and len(straight_calls) == (0 if mail else 1)
    got = to_host(straight)
    with _tasks_only():
        tasks = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(tasks) is None
    np.testing.assert_array_equal(got, to_host(tasks))
    assert (got == parts.y_test).mean() > 0.85


def test_candidates_that_never_come_fall_back_to_tasks(client, parts, monkeypatch):
    """A block's holder whose box stays short of the other holders' candidates gives up
    after the compute timeout, and the same predictions come from tasks."""
    import dask

    from mgpu_dask.knn import exchange

    Q = shard(parts.X_test, client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    want = to_host(clf.predict(Q, on_host=True))

    def lost(name, block, candidates):  # runs on the holder, a copy of it (pickled)
        return None

    monkeypatch.setattr(exchange, "deposit", lost)
    with dask.config.set({"mgpu-dask.cluster.compute-timeout": "2s"}):
        pred = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(pred) is None
    np.testing.assert_array_equal(to_host(pred), want)


def test_a_query_block_that_cannot_be_fetched_falls_back_to_tasks(client, parts, monkeypatch):
    """A shard holder that cannot have another worker's query block (moved on, its holder
    lost) answers None, and the same predictions come from tasks."""
    from mgpu_dask.knn import exchange

    Q = shard(parts.X_test, client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    want = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(want) is not None  # straight while the blocks are had

    def gone(key, name="", inbox=None, reply=0, dask_worker=None):  # runs on the holder
        raise KeyError(key)  # (a copy of it: pickled)

    monkeypatch.setattr(exchange, "held_block", gone)
    pred = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(pred) is None
    np.testing.assert_array_equal(to_host(pred), to_host(want))


def test_a_query_blocks_holder_hands_it_out_before_searching_it(client, parts, monkeypatch):
    """Shard plan, the queries in one block: its holder waits until the other shard holder
    has fetched the block before it searches (a search holds the interpreter, so a fetch
    asked meanwhile waits about one search), then searches; the predictions are the
    tasks' ones."""
    import threading

    from mgpu_dask.knn import blocks, exchange

    events = []  # (what, thread): the workers run in this process
    real_search, real_handed = blocks.search, exchange._handed_out

    def search(*args, **kwargs):
        events.append(("search", threading.current_thread().name))
        return real_search(*args, **kwargs)

    def handed(out, wait):
        done = real_handed(out, wait)
        events.append((("handed", done), threading.current_thread().name))
        return done

    monkeypatch.setattr(blocks, "search", search)
    monkeypatch.setattr(exchange, "_handed_out", handed)
    workers = sorted(client.nthreads())
    Q = shard(parts.X_test, client, dtype=np.float32, workers=workers[:1])  # one block
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    pred = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(pred) is not None
    holder = [t for what, t in events if what == ("handed", True)]
    assert len(holder) == 1, events
    mine = [what for what, t in events if t == holder[0]]
    assert mine[0] == ("handed", True) and "search" in mine[1:], events
    with _tasks_only():
        np.testing.assert_array_equal(to_host(pred), to_host(clf.predict(Q, on_host=True)))


def test_straight_predictions_can_be_turned_off_for_the_dashboard(client, parts):
    """``mgpu-dask.cluster.straight-predictions: false``: every predict is a task again."""
    import dask

    Q = shard(parts.X_test, client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    straight = to_host(clf.predict(Q, on_host=True))
    with dask.config.set({"mgpu-dask.cluster.straight-predictions": False}):
        tasks = clf.predict(Q, on_host=True)
        assert placement.blocks_in_hand(tasks) is None and futures_of(tasks)
    np.testing.assert_array_equal(to_host(tasks), straight)


def test_knn_straight_matches_scikit_learn(client, parts, straight_calls):
    from sklearn.neighbors import KNeighborsClassifier as Reference

    Q = shard(parts.X_test, client, dtype=np.float32)
    ours = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    got = to_host(ours.predict(Q, on_host=True))
    assert straight_calls and straight_calls[-1] is not None
    ref = Reference(3, weights="distance", algorithm="brute").fit(parts.X_train, parts.y_train)
    np.testing.assert_array_equal(got, ref.predict(parts.X_test))


def test_device_predictions_stay_tasks(client, parts, straight_calls):
    """Predictions kept on the workers (``on_host=False``) are never brought back straight."""
    Q = shard(parts.X_test, client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    pred = clf.predict(Q)
    assert straight_calls == [] and futures_of(pred)


def test_a_block_no_longer_held_is_refused_and_nothing_runs(client):
    Q = client.persist(da.from_array(np.arange(12.0).reshape(6, 2), chunks=(3, 2)))
    wait(futures_of(Q))
    futures, where = placement.locate(client, Q)
    ran = []
    calls = {where[0]: [(ran.append, (direct.Held(futures[0].key),)),
                        (ran.append, (direct.Held("no-such-block"),))]}
    assert direct.run_held(client, calls, timeout=30) is None
    assert ran == []
    calls = {where[0]: [(np.sum, (direct.Held(futures[0].key),))]}
    assert direct.run_held(client, calls, timeout=30) == {where[0]: [np.arange(6.0).sum()]}


def test_a_call_that_raises_raises_here(client):
    Q = client.persist(da.from_array(np.arange(6.0), chunks=3))
    wait(futures_of(Q))
    futures, where = placement.locate(client, Q)

    def broken(block):
        raise ValueError("bad block")

    with pytest.raises(ValueError, match="bad block"):
        direct.run_held(client, {where[0]: [(broken, (direct.Held(futures[0].key),))]}, 30)


def test_moved_blocks_fall_back_to_tasks(client, parts, straight_calls, monkeypatch):
    """Holders remembered from an earlier predict that no longer hold their blocks: the
    workers refuse, and the same predictions come from tasks."""
    Q = shard(parts.X_test, client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    first = to_host(clf.predict(Q, on_host=True))
    real = direct._answer_held  # what held calls run, over a lane or Dask's RPC

    def moved(calls, dask_worker):
        return {"refused": "moved", "message": "test"}

    monkeypatch.setattr(direct, "_answer_held", moved)
    again = clf.predict(Q, on_host=True)
    assert straight_calls[-1] is None and placement.blocks_in_hand(again) is None
    np.testing.assert_array_equal(to_host(again), first)
    monkeypatch.setattr(direct, "_answer_held", real)
    # the refusal forgot where the blocks were: the next predict asks the scheduler again
    scheduler = client.scheduler.address
    assert not any((scheduler, f.key) in placement._KNOWN_HOLDERS for f in futures_of(Q))
    third = clf.predict(Q, on_host=True)
    assert straight_calls[-1] is not None
    np.testing.assert_array_equal(to_host(third), first)


def test_an_unreachable_worker_falls_back(client, monkeypatch):
    from mgpu_dask.parallel import results

    async def unreachable(client, workers):
        return False

    monkeypatch.setattr(results, "reachable", unreachable)
    assert direct.run_held(client, {"tcp://192.0.2.1:1": [(len, ([],))]}, 5) is None  # TEST-NET


def test_blocks_in_hand_only_for_arrays_made_in_hand(monkeypatch):
    from mgpu_dask.parallel import inputs

    blocks = [np.arange(3), np.arange(3, 5)]
    held = placement.in_hand("answers-x", blocks, ((3, 2),), np.empty(0, int))
    assert [b.tolist() for b in placement.blocks_in_hand(held)] == [[0, 1, 2], [3, 4]]
    with monkeypatch.context() as m:  # answers in hand: no client is asked
        m.setattr(inputs, "active_client", lambda: pytest.fail("a client was asked"))
        np.testing.assert_array_equal(to_host(held), np.arange(5))
    np.testing.assert_array_equal(held.compute(scheduler="sync"), np.arange(5))
    assert placement.blocks_in_hand(held + 1) is None  # derived: computed the usual way
    np.testing.assert_array_equal(to_host(held + 1), np.arange(1, 6))
    assert placement.blocks_in_hand(da.arange(5, chunks=2)) is None
    two = placement.in_hand("answers-y", [np.ones((2, 3)), np.zeros((1, 3))],
                            ((2, 1), (3,)), np.empty((0, 0)))
    np.testing.assert_array_equal(to_host(two), np.vstack([np.ones((2, 3)), np.zeros((1, 3))]))


@pytest.mark.slow
def test_a_lost_holder_falls_back_to_tasks(process_client, parts):
    """A worker killed after the holders were remembered: the predict still answers right."""
    import os
    import signal
    import time

    Q = shard(parts.X_test, process_client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    first = to_host(clf.predict(Q, on_host=True))
    _, where = placement.locate(process_client, Q, remembered=True)
    os.kill(process_client.run(os.getpid)[where[0]], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while where[0] in process_client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.workers)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    np.testing.assert_array_equal(to_host(clf.predict(Q, on_host=True), timeout=120), first)


def test_answers_in_hand_compute_without_the_scheduler(client, monkeypatch):
    """``compute()`` of predictions brought back straight joins the blocks in hand: the
    client's ``get`` (the scheduler's round trip) is not called; anything derived from them
    computes as usual."""
    held = placement.in_hand("answers-z", [np.arange(3), np.arange(3, 7)], ((3, 4),),
                             np.empty(0, int))
    with monkeypatch.context() as m:
        m.setattr(client, "get", lambda *a, **k: pytest.fail("the scheduler was asked"))
        np.testing.assert_array_equal(held.compute(), np.arange(7))
        np.testing.assert_array_equal(np.asarray(held), np.arange(7))
    np.testing.assert_array_equal((held * 2).compute(), np.arange(7) * 2)
    np.testing.assert_array_equal(held.compute(scheduler="sync"), np.arange(7))


def _lane_calls(dask_worker=None):
    from mgpu_dask.parallel import direct

    return direct.PEER_LANE_CALLS[0]


def test_shard_holders_hand_blocks_and_candidates_over_their_lanes(process_client, parts):
    """Shard holders on one host fetch the query block and hand over their candidates
    through each other's lanes (arrays out of band), not Dask's RPC; with lanes off,
    through Dask's RPC: the same predictions either way."""
    import dask

    client = process_client
    workers = sorted(client.nthreads())
    Q = shard(parts.X_test, client, dtype=np.float32, workers=workers[:1])  # one block
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    assert len(set(clf.layout_.workers)) == 3
    before = sum(client.run(_lane_calls).values())
    got = to_host(clf.predict(Q, on_host=True))
    over_lanes = sum(client.run(_lane_calls).values()) - before
    assert over_lanes == 4  # two holders each fetch the block and hand over candidates
    with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
        rpc = to_host(clf.predict(Q, on_host=True))
    assert sum(client.run(_lane_calls).values()) - before == over_lanes
    np.testing.assert_array_equal(got, rpc)
    assert (got == parts.y_test).mean() > 0.85
