"""Values made on a worker before their task comes (mgpu_dask.parallel.made_ahead)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import digits_xy

from mgpu_dask.data import shard, split
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.parallel import made_ahead, shared_rows
from mgpu_dask.parallel.inputs import to_host


def test_a_value_made_ahead_is_taken_once(monkeypatch):
    monkeypatch.setattr(made_ahead, "_made", {})
    monkeypatch.setattr(made_ahead, "_marks", type(made_ahead._marks)())
    calls = []

    def make():
        calls.append(1)
        return object()

    assert made_ahead.make_here("a", make)
    value = made_ahead._made["a"][1].result()
    assert made_ahead.taken("a", make) is value  # not made again
    assert len(calls) == 1 and "a" not in made_ahead._made
    fresh = made_ahead.taken("a", make)  # taken already: made here
    assert fresh is not value and len(calls) == 2
    # A task that came first leaves a mark: the late call makes nothing.
    made_ahead.taken("b", make)
    assert not made_ahead.make_here("b", make) and len(calls) == 3
    assert "b" not in made_ahead._made


def test_a_failed_or_stale_value_is_made_by_the_task(monkeypatch):
    monkeypatch.setattr(made_ahead, "_made", {})
    monkeypatch.setattr(made_ahead, "_marks", type(made_ahead._marks)())

    def broken():
        raise MemoryError("ahead")

    assert made_ahead.make_here("c", broken)
    assert made_ahead.taken("c", lambda: 7) == 7  # the task's own attempt decides
    with pytest.raises(ZeroDivisionError):
        made_ahead.taken("d", lambda: 1 / 0)
    assert made_ahead.make_here("e", lambda: 1)
    monkeypatch.setattr(made_ahead, "KEEP_SECONDS", -1.0)
    assert made_ahead.make_here("f", lambda: 2)  # "e" was never taken: dropped
    assert set(made_ahead._made) == {"f"}


def _left(dask_worker=None) -> int:
    from mgpu_dask.parallel import made_ahead as here

    return len(here._made)


def test_a_knn_fit_through_a_file_starts_ahead_and_predicts_as_in_the_graph(
        process_client, monkeypatch):
    X, y = digits_xy()
    X, y = np.tile(X, (16, 1)), np.tile(y, 16)  # through the shared-memory file
    s = split(X, y, seed=4)
    asked = []
    real = made_ahead.ask_ahead

    def ask_ahead(client, makes):
        asked.append(sorted(makes))
        return real(client, makes)

    monkeypatch.setattr(made_ahead, "ask_ahead", ask_ahead)
    Q = shard(s.X_test, process_client, dtype=np.float32)  # small: in the graph
    assert asked == []
    clf = KNeighborsClassifier(3, plan="replicate").fit(s.X_train, s.y_train)
    ahead = to_host(clf.predict(Q))
    assert asked == [sorted(process_client.scheduler_info()["workers"])]
    made_ahead._asker.submit(lambda: None).result()  # the workers have answered
    assert set(process_client.run(_left).values()) == {0}  # every value taken
    monkeypatch.setattr(shared_rows, "MIN_BYTES", 1 << 62)  # the rows in the graph
    in_graph = to_host(KNeighborsClassifier(3, plan="replicate").fit(s.X_train, s.y_train)
                       .predict(Q))
    assert len(asked) == 1  # nothing asked ahead for rows in the graph
    np.testing.assert_array_equal(ahead, in_graph)


def _taken_tokens(dask_worker=None) -> int:
    from mgpu_dask.parallel import made_ahead as here

    return len(here._made)


def test_shards_through_a_file_are_read_ahead_and_equal_the_rows(process_client, monkeypatch):
    X, _ = digits_xy()
    X = np.tile(X, (16, 1))
    workers = sorted(process_client.scheduler_info()["workers"])
    asked = []
    real = made_ahead.ask_ahead

    def ask_ahead(client, makes):
        asked.append({w: [token for token, _ in pairs] for w, pairs in makes.items()})
        return real(client, makes)

    monkeypatch.setattr(made_ahead, "ask_ahead", ask_ahead)
    Xd = shard(X, process_client, n_shards=6, dtype=np.float32, scale=0.5)
    assert len(asked) == 1 and sorted(asked[0]) == workers
    assert sorted(len(tokens) for tokens in asked[0].values()) == [2, 2, 2]  # two each
    np.testing.assert_array_equal(to_host(Xd), X.astype(np.float32) * np.float32(0.5))
    made_ahead._asker.submit(lambda: None).result()
    assert set(process_client.run(_taken_tokens).values()) == {0}
