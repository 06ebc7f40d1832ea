"""A holder's int8 levels are kept for the same block objects under the same keys, and go
when a block's key leaves the worker's memory (the ReleaseKept plugin)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mgpu_dask.parallel import kept_with_blocks
from mgpu_dask.logreg.single_host import keeping_levels


@pytest.fixture(autouse=True)
def empty(monkeypatch):
    monkeypatch.setattr(kept_with_blocks, "_KEPT", type(kept_with_blocks._KEPT)())


def _maker(calls):
    def make():
        calls.append(1)
        return object()
    return make


def test_the_same_blocks_under_the_same_keys_are_converted_once():
    blocks, calls = [np.zeros(3), np.ones(3)], []
    first = kept_with_blocks.kept_or_made(blocks, ["a", "b"], 0.5, _maker(calls))
    assert kept_with_blocks.kept_or_made(list(blocks), ["a", "b"], 0.5, _maker(calls)) is first
    assert len(calls) == 1
    # another scale, other block objects, or no keys: made again
    kept_with_blocks.kept_or_made(blocks, ["a", "b"], 0.25, _maker(calls))
    kept_with_blocks.kept_or_made([np.zeros(3), np.ones(3)], ["a", "b"], 0.5, _maker(calls))
    kept_with_blocks.kept_or_made(blocks, None, 0.5, _maker(calls))
    kept_with_blocks.kept_or_made(blocks, None, 0.5, _maker(calls))
    assert len(calls) == 5


def test_forgetting_a_key_drops_what_was_made_from_it():
    calls = []
    kept_with_blocks.kept_or_made([np.zeros(1)], ["a"], None, _maker(calls))
    kept_with_blocks.kept_or_made([np.zeros(1), np.zeros(1)], ["b", "c"], None, _maker(calls))
    kept_with_blocks.ReleaseKept().transition("c", "memory", "released")
    assert kept_with_blocks.kept() == 1
    kept_with_blocks.ReleaseKept().transition("a", "waiting", "memory")  # arriving: nothing goes
    assert kept_with_blocks.kept() == 1


def test_at_most_kept_sets(monkeypatch):
    monkeypatch.setattr(kept_with_blocks, "KEPT", 2)
    for key in "abc":
        kept_with_blocks.kept_or_made([np.zeros(1)], [key], None, _maker([]))
    assert [e[0] for e in kept_with_blocks._KEPT] == [("b",), ("c",)]


def _keep_for(key, dask_worker=None):
    block = dask_worker.data[key]
    kept_with_blocks.kept_or_made([block], [key], None, lambda: "levels")
    return kept_with_blocks.kept()


def _count(dask_worker=None):
    return kept_with_blocks.kept()


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
        if not any(key in e[0] for e in kept_with_blocks._KEPT):  # in-process workers share it
            break
        time.sleep(0.05)
    assert not any(key in e[0] for e in kept_with_blocks._KEPT)
