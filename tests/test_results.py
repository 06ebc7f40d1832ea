"""Results fetched straight from the worker a task was pinned to (no who_has round trip),
and Client.gather's answer wherever that worker does not have them."""

from __future__ import annotations

import numpy as np
import pytest

from mgpu_dask.data import shard
from mgpu_dask.parallel import placement, results
from mgpu_dask.parallel.inputs import to_host


def _double(block):
    return block * 2


def _fail(block):
    raise ZeroDivisionError("on purpose")


@pytest.fixture
def counted(client, monkeypatch):
    """Counts the client's own gathers (the fallback) and the scheduler's who_has calls."""
    calls = {"gather": 0, "who_has": 0}
    real_gather = client._gather

    async def gather(futures, *args, **kwargs):
        calls["gather"] += 1
        return await real_gather(futures, *args, **kwargs)

    monkeypatch.setattr(client, "_gather", gather)
    scheduler = client.cluster.scheduler
    real_who_has = scheduler.get_who_has

    def who_has(*args, **kwargs):
        calls["who_has"] += 1
        return real_who_has(*args, **kwargs)

    monkeypatch.setitem(scheduler.handlers, "who_has", who_has)
    return calls


def _mapped(client, X, fn):
    return placement.map_blocks(client, fn, X, name=placement.fresh_name("t"),
                                chunks=X.chunks, meta=np.empty((0, 0), X.dtype))


def test_pinned_blocks_come_straight_from_their_workers(client, counted):
    rng = np.random.default_rng()
    data = rng.integers(0, 100, (40, 3))
    X = shard(data, client, device="cpu", timeout=30)
    out = _mapped(client, X, _double)  # finding the shards' holders may ask who_has
    counted.update(gather=0, who_has=0)
    np.testing.assert_array_equal(to_host(out), data * 2)
    assert counted == {"gather": 0, "who_has": 0}


def test_a_wrong_holder_falls_back_to_the_scheduler(client, counted):
    data = np.arange(12).reshape(6, 2)
    X = shard(data, client, device="cpu", n_shards=1, timeout=30)
    future = placement.row_futures(_mapped(client, X, _double))[0]
    future.result(timeout=30)
    holder = placement.holders(client, [future])[0]
    assert holder is not None
    other = next(w for w in client.scheduler_info()["workers"] if w != holder)
    counted.update(gather=0, who_has=0)
    np.testing.assert_array_equal(results.gather(client, [future], 30, where=[other])[0],
                                  data * 2)
    assert counted["gather"] == 1


def test_a_failed_task_raises_its_own_error(client, counted):
    X = shard(np.ones((8, 2)), client, device="cpu", timeout=30)
    with pytest.raises(ZeroDivisionError, match="on purpose"):
        to_host(_mapped(client, X, _fail))


def test_unpinned_futures_use_client_gather(client, counted):
    future = client.submit(sum, [1, 2, 3])
    assert results.gather(client, [future], 30) == [6]
    assert counted["gather"] == 1


def test_the_pins_remembered_are_bounded(client, monkeypatch):
    monkeypatch.setattr(results, "KEPT", 5)
    monkeypatch.setattr(results, "_PINNED_AT", type(results._PINNED_AT)())
    results.remember(client, {("k", i): "w" for i in range(12)})
    assert len(results._PINNED_AT) == 5
    assert (client.scheduler.address, ("k", 11)) in results._PINNED_AT


def test_a_pinned_worker_that_is_gone_costs_a_second_not_dask_s_connect_timeout(
        client, counted, monkeypatch):
    import time

    monkeypatch.setattr(results, "_UNREACHABLE", set())
    future = client.submit(sum, [4, 5], pure=False)
    future.result(timeout=30)
    counted.update(gather=0, who_has=0)
    started = time.monotonic()
    assert results.gather(client, [future], 30, where=["tcp://127.0.0.1:9"]) == [9]
    assert time.monotonic() - started < 10 * results.CONNECT_SECONDS
    assert counted["gather"] == 1
    # once refused, that worker is not tried again: the next gather asks the scheduler at once
    monkeypatch.setattr(results, "CONNECT_SECONDS", 30.0)
    started = time.monotonic()
    assert results.gather(client, [future], 30, where=["tcp://127.0.0.1:9"]) == [9]
    assert time.monotonic() - started < 5 and counted["gather"] == 2
