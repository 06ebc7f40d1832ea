"""Query blocks of workers that share one GPU, searched as one (``knn.joined``).

Workers that share a GPU are found by the GPU each reports; on CPU workers the
tests say they share one, so the same code runs on NumPy blocks (exported
through POSIX shared memory, not CUDA IPC).  The joined search must predict
what each worker's own search predicts, keep the joined queries while the
blocks live (a later predict asks no other worker), let them go with the
blocks, and fall back to each worker's own search where it cannot join.
"""

from __future__ import annotations

import time

import dask
import numpy as np
import pytest
from conftest import digits_xy, shm_segments

from mgpu_dask.data import shard, split
from mgpu_dask.knn import KNeighborsClassifier, blocks, joined, straight
from mgpu_dask.parallel import kept_with_blocks, peer_views, placement
from mgpu_dask.parallel.inputs import to_host


@pytest.fixture(scope="module")
def parts():
    return split(*digits_xy(), seed=5)


def _one_gpu(monkeypatch):
    """Every worker says it shares one GPU."""
    monkeypatch.setattr(straight, "gpu_ids", lambda client, where: {
        w: "here/0000:00:00.0" for w in where})


def _soon(check, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _most_joined(client) -> int:
    return max(r["joined"] for r in client.run(blocks.what_ran).values())


def test_searchers_are_the_first_holder_of_each_shared_gpu():
    where = ["a", "b", "c", "a", "d", "e"]
    ids = {"a": "h/1", "b": "h/1", "c": "h/2", "d": None, "e": "h/3"}
    # h/1: blocks of a and b, searched on a; h/2 and h/3 hold one worker's blocks each
    assert straight.searchers(where, ids) == {"a": [0, 1, 3]}
    ids["c"] = ids["e"] = "h/2"
    assert straight.searchers(where, ids) == {"a": [0, 1, 3], "c": [2, 5]}
    assert straight.searchers(where, {w: None for w in where}) == {}
    assert straight.searchers(["b", "a"], {"a": "h/1", "b": "h/1"}) == {"b": [0, 1]}


def test_workers_sharing_a_device_search_their_queries_as_one(process_client, parts,
                                                              monkeypatch):
    client, segments = process_client, shm_segments()
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    Q = shard(parts.X_test, client, dtype=np.float32)
    alone = to_host(clf.predict(Q, on_host=True))  # each worker searches its own block
    assert _most_joined(client) == 0
    _one_gpu(monkeypatch)
    host = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(host) is not None  # straight, no task
    np.testing.assert_array_equal(to_host(host), alone)
    assert _most_joined(client) == 3  # one worker searched the three workers' blocks
    exports = sum(client.run(joined.exported).values())
    assert exports == 2  # the two other holders exported theirs, once
    assert _soon(lambda: set(client.run(peer_views.exported).values()) == {0})  # released
    assert shm_segments() <= segments
    np.testing.assert_array_equal(to_host(clf.predict(Q, on_host=True)), alone)
    assert sum(client.run(joined.exported).values()) == exports  # kept: nobody asked again
    assert sum(client.run(kept_with_blocks.kept).values()) == 1
    del host, Q
    assert _soon(lambda: sum(client.run(kept_with_blocks.kept).values()) == 0)  # with the blocks


def test_a_searcher_that_cannot_join_leaves_each_worker_its_own_search(client, parts,
                                                                       monkeypatch):
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    Q = shard(parts.X_test, client, dtype=np.float32)
    alone = to_host(clf.predict(Q, on_host=True))
    _one_gpu(monkeypatch)
    asked = []
    tried = joined.joined_queries

    def gone(worker, own, others, *args):  # a block left its holder before its export
        asked.append(others)
        return tried(worker, own, tuple((i, h, "gone") for i, h, _ in others), *args)

    monkeypatch.setattr(joined, "joined_queries", gone)
    runs = []
    real = placement.run_straight
    monkeypatch.setattr(placement, "run_straight",
                        lambda *a, **k: runs.append(1) or real(*a, **k))
    np.testing.assert_array_equal(to_host(clf.predict(Q, on_host=True)), alone)
    assert len(asked) == 1 and runs == [1]  # tried once, then each worker's own
    np.testing.assert_array_equal(to_host(clf.predict(Q, on_host=True)), alone)
    assert len(asked) == 1 and runs == [1, 1]  # not tried again for the same blocks


def test_one_search_per_gpu_can_be_turned_off(client, parts, monkeypatch):
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    Q = shard(parts.X_test, client, dtype=np.float32)
    _one_gpu(monkeypatch)
    monkeypatch.setattr(joined, "predictions", lambda *a, **k: pytest.fail("joined"))
    with dask.config.set({"mgpu-dask.knn.one-search-per-gpu": False}):
        to_host(clf.predict(Q, on_host=True))


def test_each_workers_gpu_is_asked_for_once(client, monkeypatch):
    import weakref

    from mgpu_dask.parallel import workers

    monkeypatch.setattr(workers, "_GPU_IDS", weakref.WeakKeyDictionary())
    asked, real = [], client.run
    monkeypatch.setattr(client, "run", lambda *a, **k: asked.append(k.get("workers"))
                        or real(*a, **k))
    where = sorted(client.scheduler_info()["workers"])
    assert workers.gpu_ids(client, where) == {w: None for w in where}  # CPU workers: no GPU
    assert workers.gpu_ids(client, where[:1] * 3) == {where[0]: None}
    assert asked == [where]  # every predict asks for them: the workers are asked once
    lost = "tcp://127.0.0.1:9"  # a worker gone: ``run`` would wait on its address for ever
    assert workers.gpu_ids(client, [lost, *where]) == {lost: None, **{w: None for w in where}}
    assert asked == [where]  # not asked


def test_a_join_that_fails_otherwise_is_said_and_each_worker_searches(client, parts,
                                                                       monkeypatch, caplog):
    clf = KNeighborsClassifier(3, plan="replicate").fit(parts.X_train, parts.y_train)
    Q = shard(parts.X_test, client, dtype=np.float32)
    alone = to_host(clf.predict(Q, on_host=True))
    _one_gpu(monkeypatch)

    def broken(parts):
        raise RuntimeError("no room")

    monkeypatch.setattr(joined, "_joined", broken)
    with caplog.at_level("WARNING", logger="mgpu_dask.knn.joined"):
        np.testing.assert_array_equal(to_host(clf.predict(Q, on_host=True)), alone)
    assert "could not join the query blocks" in caplog.text and "no room" in caplog.text
    assert _soon(lambda: set(client.run(peer_views.exported).values()) == {0})  # released


def test_a_gpu_without_a_copy_is_searched_by_the_worker_that_has_one():
    ids = {"a": "h/1", "b": "h/1", "c": "h/1", "d": "h/2"}
    # the one copy (a shard of the GPU's rows) is a's: a searches b's and c's blocks
    assert straight.searchers(["b", "c"], ids, {"a": 0}) == {"a": [0, 1]}
    assert straight.searchers(["b", "b"], ids, {"a": 0}) == {"a": [0, 1]}
    assert straight.searchers(["a", "a"], ids, {"a": 0}) == {}  # its own blocks alone
    assert straight.searchers(["d", "b"], ids, {"a": 0}) == {"a": [1]}  # h/2 has no copy


def test_adjacent_blocks_on_one_gpu_become_one_shard(client, monkeypatch):
    import dask.array as da

    from mgpu_dask.knn import layout
    from mgpu_dask.parallel.workers import Facts

    ids = {"a": "h/1", "b": "h/1", "c": "h/2"}
    monkeypatch.setattr(layout, "gpu_ids", lambda client, where: {w: ids[w] for w in where})
    memory = {w: Facts(True, (9, 0), 10**9) for w in ids}
    monkeypatch.setattr(layout, "fixed_facts", lambda client: memory)
    X = da.zeros((40, 5), chunks=10, dtype=np.float32)  # 200 bytes a block
    assert layout.gpu_runs(client, X, ["a", "b", "c", "a"]) == [range(0, 2), range(2, 3),
                                                                range(3, 4)]
    assert layout.gpu_runs(client, X, ["a", "c", "b", "c"]) is None  # none adjacent
    memory["a"] = memory["b"] = Facts(True, (9, 0), 4 * 400 - 1)  # over a quarter of h/1
    assert layout.gpu_runs(client, X, ["a", "b", "c", "a"]) is None
    with dask.config.set({"mgpu-dask.knn.one-search-per-gpu": False}):
        memory["a"] = memory["b"] = memory["c"]
        assert layout.gpu_runs(client, X, ["a", "b", "c", "a"]) is None


def test_shards_of_workers_sharing_a_gpu_are_one_shard_searched_once(process_client, parts,
                                                                      monkeypatch):
    from mgpu_dask.knn import layout

    client = process_client
    Q = shard(parts.X_test, client, dtype=np.float32)
    apart = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    assert len(apart.layout_.X) == 3  # CPU workers: a shard each
    alone = to_host(apart.predict(Q, on_host=True))
    _, found = apart.kneighbors(Q)
    _one_gpu(monkeypatch)
    monkeypatch.setattr(layout, "gpu_ids", lambda client, where: {
        w: "here/0000:00:00.0" for w in where})
    clf = KNeighborsClassifier(3, plan="shard").fit(parts.X_train, parts.y_train)
    assert len(clf.layout_.X) == 1 and clf.layout_.offsets == [0]
    assert clf.layout_.X[0].key in client.who_has(clf.layout_.X[0])  # persisted, placed
    host = clf.predict(Q, on_host=True)
    assert placement.blocks_in_hand(host) is not None  # straight, no task
    np.testing.assert_array_equal(to_host(host), alone)
    assert _most_joined(client) == 3  # the shard's holder searched every block at once
    _, joined_found = clf.kneighbors(Q)
    np.testing.assert_array_equal(to_host(joined_found), to_host(found))
    del host, Q
