"""A holder's int8 levels are kept for the same block objects under the same keys, and go
when a block's key leaves the worker's memory (the ReleaseLevels plugin)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mgpu_dask.logreg import kept_levels
from mgpu_dask.logreg.single_host import keeping_levels


@pytest.fixture(autouse=True)
def empty(monkeypatch):
    monkeypatch.setattr(kept_levels, "_KEPT", type(kept_levels._KEPT)())


def _maker(calls):
    def make():
        calls.append(1)
        return object()
    return make


def test_the_same_blocks_under_the_same_keys_are_converted_once():
    blocks, calls = [np.zeros(3), np.ones(3)], []
    first = kept_levels.levels_of(blocks, ["a", "b"], 0.5, _maker(calls))
    assert kept_levels.levels_of(list(blocks), ["a", "b"], 0.5, _maker(calls)) is first
    assert len(calls) == 1
    # another scale, other block objects, or no keys: made again
    kept_levels.levels_of(blocks, ["a", "b"], 0.25, _maker(calls))
    kept_levels.levels_of([np.zeros(3), np.ones(3)], ["a", "b"], 0.5, _maker(calls))
    kept_levels.levels_of(blocks, None, 0.5, _maker(calls))
    kept_levels.levels_of(blocks, None, 0.5, _maker(calls))
    assert len(calls) == 5


def test_forgetting_a_key_drops_what_was_made_from_it():
    calls = []
    kept_levels.levels_of([np.zeros(1)], ["a"], None, _maker(calls))
    kept_levels.levels_of([np.zeros(1), np.zeros(1)], ["b", "c"], None, _maker(calls))
    kept_levels.ReleaseLevels().transition("c", "memory", "released")
    assert kept_levels.kept() == 1
    kept_levels.ReleaseLevels().transition("a", "waiting", "memory")  # arriving: nothing goes
    assert kept_levels.kept() == 1


def test_at_most_kept_sets(monkeypatch):
    monkeypatch.setattr(kept_levels, "KEPT", 2)
    for key in "abc":
        kept_levels.levels_of([np.zeros(1)], [key], None, _maker([]))
    assert [e[0] for e in kept_levels._KEPT] == [("b",), ("c",)]


def _keep_for(key, dask_worker=None):
    block = dask_worker.data[key]
    kept_levels.levels_of([block], [key], None, lambda: "levels")
    return kept_levels.kept()


def _count(dask_worker=None):
    return kept_levels.kept()


def test_a_released_block_takes_its_levels_along(client):
    assert keeping_levels(client)
    future = client.submit(np.arange, 10, pure=False)
    future.result()
    worker = next(iter(client.who_has([future])[future.key]))
    assert client.run(_keep_for, future.key, workers=[worker])[worker] >= 1
    key = future.key
    del future
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(key in e[0] for e in kept_levels._KEPT):  # in-process workers share it
            break
        time.sleep(0.05)
    assert not any(key in e[0] for e in kept_levels._KEPT)
