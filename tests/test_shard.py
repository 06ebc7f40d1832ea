from __future__ import annotations

import numpy as np
import pytest

from mgpu_dask.data import shard, shard_locations, worker_addresses
from mgpu_dask.data.sharding import row_bounds


def test_one_shard_per_worker(client):
    X = np.random.default_rng().integers(0, 256, (101, 7), dtype=np.uint8)
    arr = shard(X, client, dtype=np.float32, device="cpu")  # a GPU machine's too
    assert arr.numblocks == (2, 1) and arr.dtype == np.float32
    assert type(arr._meta) is np.ndarray
    locations = shard_locations(arr, client)
    assert [s.index for s in locations] == [0, 1]
    assert sorted(s.worker for s in locations) == sorted(worker_addresses(client))
    assert sum(s.rows for s in locations) == 101
    assert all(s.array_type == "numpy.ndarray" and s.device == "host" for s in locations)
    np.testing.assert_array_equal(arr.compute(), X.astype(np.float32))


def test_chunk_rows_and_labels(client):
    y = np.arange(50, dtype=np.int32)
    arr = shard(y, client, chunk_rows=12, device="cpu")
    assert arr.chunks == ((10, 10, 10, 10, 10),)  # ceil(50 / 12) = 5 near-equal shards
    assert {s.worker for s in shard_locations(arr, client)} == set(worker_addresses(client))
    np.testing.assert_array_equal(arr.compute(), y)


def test_who_has_agrees(client):
    arr = shard(np.ones((10, 2)), client)
    who = client.who_has(arr)
    assert len(who) == 2 and all(len(w) == 1 for w in who.values())


@pytest.mark.parametrize("n, shards, rows, expect", [
    (10, 3, None, [(0, 3), (3, 7), (7, 10)]), (10, None, 4, [(0, 3), (3, 7), (7, 10)]),
    (2, 5, None, [(0, 1), (1, 2)]),
])
def test_row_bounds(n, shards, rows, expect):
    assert row_bounds(n, shards, rows) == expect


def test_bad_device(client):
    with pytest.raises(ValueError, match="device"):
        shard(np.ones((4, 2)), client, device="tpu")


def test_a_cluster_without_workers_is_waited_for_then_a_clear_error():
    import time

    import dask
    from distributed import Client, LocalCluster

    from mgpu_dask.exceptions import ClusterError

    X = np.arange(40, dtype=np.float32).reshape(10, 4)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        started = time.perf_counter()
        with dask.config.set({"mgpu-dask.cluster.start-timeout": "1s"}), \
                pytest.raises(ClusterError, match=r"no workers \(waited 1 s\)"):
            shard(X, c, device="cpu")
        assert time.perf_counter() - started < 10
        cluster.scale(2)  # not waited for here: shard waits for the first to join
        Xd = shard(X, c, device="cpu")
        np.testing.assert_array_equal(Xd.compute(), X)
        assert len(worker_addresses(c)) >= 1


def test_the_worker_list_is_asked_for_not_read_from_the_clients_cache(client, monkeypatch):
    """distributed's periodic refresh may leave ``scheduler_info()`` without workers
    (it failed a CI run): the worker list comes from the scheduler itself."""
    from distributed import Client

    client.sync(client._update_scheduler_info)  # the refresh: cluster totals, no workers
    monkeypatch.setattr(Client, "scheduler_info", lambda self, *a, **k: {"workers": {}})
    assert len(worker_addresses(client)) == 2
    X = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.testing.assert_array_equal(shard(X, client, device="cpu").compute(), X)
