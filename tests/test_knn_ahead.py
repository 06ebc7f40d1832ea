"""A KNN fit on a machine whose kernel cache lacks its predict's kernels has them compiled
in side processes beside the fit (``knn.ahead``), one worker of each host asked."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from mgpu_dask.kernels.ahead import decode
from mgpu_dask.knn import ahead, choices, warmup


def _search(**over):
    fields = dict(gpu=True, dtype="float32", n_features=32, precision="auto", method="gemm",
                  k=10, margin=None, weights="uniform", merge=False)
    return warmup.Search(**{**fields, **over})


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(warmup, "gpu_capability", lambda: (9, 0))


@pytest.mark.parametrize("over, want", [
    ({}, {"half_query_rows", "refine_rows_short", "pack_rows", "vote_rows"}),
    ({"n_features": 768}, {"half_query_rows", "refine_rows", "pack_rows", "vote_rows"}),
    ({"merge": True}, {"half_query_rows", "refine_rows_short", "pack_rows", "vote_rows",
                       "merge_pairs"}),
    ({"dtype": "uint8", "n_features": 784}, {"pack_rows", "vote_rows"})])
def test_the_items_are_the_predicts_kernels_by_types_numba_reads_back(hopper, over, want):
    got = ahead.items(_search(**over))
    assert {item["numba"].rsplit(":", 1)[1] for item in got} == want
    for item in got:
        module, name = item["numba"].split(":")
        assert hasattr(importlib.import_module(module), name)
        assert len(decode(item["signature"])) == len(ahead.SIGNATURES[item["numba"]][0])
        assert item["seconds"] > 0


def test_the_signatures_are_those_the_mnist_runs_recorded():
    """Where ``jobs/ahead.json`` holds a kernel recorded on a GPU, the types here are its."""
    import json

    from mgpu_dask.jobs import ahead as jobs_ahead

    recorded = {item["numba"]: item["signature"]
                for run in json.loads(jobs_ahead.LIST.read_text())["runs"].values()
                for item in run if "numba" in item}
    shared = set(recorded) & set(ahead.SIGNATURES)
    assert {"mgpu_dask.kernels.knn.cuda:vote_rows", "mgpu_dask.kernels.knn.cuda:refine_rows"} <= shared
    for name in shared:
        assert recorded[name] == ahead.SIGNATURES[name][0], name


def test_nothing_starts_without_a_gpu():
    fields = _search()._asdict()
    assert not ahead.compile_ahead(**{**fields, "gpu": False})
    assert not ahead.compile_ahead(**fields)  # the CUDA simulator (CI) is no GPU either


class _Client:
    def __init__(self, workers):
        self.workers, self.asked = workers, []

    def nthreads(self):
        return {w: 1 for w in self.workers}

    def run(self, fn, workers, **kwargs):
        self.asked.append((fn.name, sorted(workers), kwargs))
        return {}


def test_one_worker_of_each_host_is_asked():
    client = _Client(["tcp://10.0.0.1:4001", "tcp://10.0.0.1:4002", "tcp://10.0.0.2:4001",
                      "tcp://10.0.0.2:4005"])
    choices.compile_ahead_on_hosts(client, {"gpu": True})
    assert client.asked == [("compile_ahead", ["tcp://10.0.0.1:4001", "tcp://10.0.0.2:4001"],
                             {"gpu": True})]


@pytest.mark.parametrize("uncached, device, asked", [(True, "gpu", True), (False, "gpu", False),
                                                     (True, "cpu", False)])
def test_a_fit_asks_for_them_only_where_it_warned_of_compiles_on_gpus(monkeypatch, uncached,
                                                                         device, asked):
    calls = []
    monkeypatch.setattr(choices, "announce_compiles", lambda *a, **k: uncached)
    monkeypatch.setattr(choices, "compile_ahead_on_hosts", lambda c, f: calls.append(f))
    X = np.zeros((10, 4), np.float32)
    choice = choices.Choice("replicate", choices.Precision.FP16, None,
                            choices.precisions.eight_bit_of(X.dtype), 0)

    class Model:
        method, n_neighbors, margin, weights = "gemm", 3, None, "uniform"

    choices.announce(X, choice, device, Model(), None)
    assert bool(calls) == asked
    if asked:
        assert calls[0]["n_features"] == 4 and calls[0]["dtype"] == "float32"
