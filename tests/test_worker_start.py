"""Local workers forked from the fork server (mgpu_dask.worker_start), on CPU workers."""

from __future__ import annotations

import os

import dask
import numpy as np
import pytest
from conftest import digits_xy

from mgpu_dask import worker_start
from mgpu_dask.cluster import connect
from mgpu_dask.exceptions import ClusterError
from mgpu_dask.knn import KNeighborsClassifier


def _worker_facts() -> dict:
    import sys

    return {"ppid": os.getppid(), "omp": os.environ.get("OMP_NUM_THREADS"),
            "preloaded": "mgpu_dask.worker_imports" in sys.modules}


@pytest.mark.parametrize("setting, device, expected", [
    ("auto", "gpu", "forkserver"), ("auto", "cpu", "spawn"),
    ("spawn", "gpu", "spawn"), ("forkserver", "cpu", "forkserver")])
def test_method_follows_the_setting(setting, device, expected):
    with dask.config.set({"mgpu-dask.cluster.worker-start": setting}):
        assert worker_start.method(device) == expected


def test_unknown_setting_is_one_clear_error():
    with dask.config.set({"mgpu-dask.cluster.worker-start": "thread"}):
        with pytest.raises(ClusterError, match="worker-start is 'thread'; use one of auto"):
            with connect(1, device="cpu", dashboard_address=":0", timeout=30):
                pass


def test_forked_workers_run_knn_like_spawned_ones():
    X, y = digits_xy()
    got = {}
    for how in ("forkserver", "spawn"):
        with dask.config.set({"mgpu-dask.cluster.worker-start": how}):
            with connect(2, device="cpu", dashboard_address=":0", timeout=60) as rc:
                facts = rc.client.run(_worker_facts)
                clf = KNeighborsClassifier(3).fit(X[:1200], y[:1200])
                got[how] = np.asarray(clf.predict(X[1200:]))
        parents = {f["ppid"] for f in facts.values()}
        if how == "forkserver":  # every worker is a child of the one server, which preloaded
            assert parents == {worker_start.server_pid()}
            assert all(f["preloaded"] for f in facts.values())
        else:
            assert worker_start.server_pid() not in parents
            assert not any(f["preloaded"] for f in facts.values())
        assert {f["omp"] for f in facts.values()} == {"1"}  # Dask's pre-spawn environment
    np.testing.assert_array_equal(got["forkserver"], got["spawn"])
    assert (got["spawn"] == y[1200:]).mean() > 0.95
