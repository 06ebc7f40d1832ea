"""Every multi-worker path with 2 and 4 Dask workers sharing one GPU (``shared_gpu``):
KNN's replicate and shard plans predict what one worker predicts, and every
logistic-regression fit route reaches one worker's objective.  Predictions asked for
on the host come straight from their holders (``parallel.direct.run_held``) where
they can, and equal the task path's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shared_gpu import main, shared_gpu_cluster

ROUTES = [("single-host", "device", "fp32"), ("single-host", "device", "int8"),
          ("single-host", "host", "fp32"), ("actors", "host", "fp32")]


def _run(n_workers: int, split) -> dict:
    """KNN predictions of both plans and the objective of every fit route, on
    ``n_workers`` workers of GPU 0, with the shards on every worker."""
    from distributed import Client

    from mgpu_dask.data import shard, shard_locations
    from mgpu_dask.knn import KNeighborsClassifier, blocks
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.parallel import kept_with_blocks, placement
    from mgpu_dask.parallel.inputs import to_host

    s, out = split, {}
    with shared_gpu_cluster(n_workers) as address, Client(address) as client, \
            client.as_current():
        Q = shard(s.X_test, client)
        where = shard_locations(Q, client)
        assert len({w.worker for w in where}) == n_workers
        assert {w.array_type for w in where} == {"cupy.ndarray"}
        for plan in ("replicate", "shard"):
            clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
            assert clf.plan_ == plan
            out[plan] = to_host(clf.predict(Q))
            host = clf.predict(Q, on_host=True)  # straight, under either plan
            out[plan, "straight"] = placement.blocks_in_hand(host) is not None
            out[plan, "host"] = to_host(host)
            out[plan, "copies"] = len(clf.layout_.X)
            if plan == "replicate":  # the blocks on one GPU searched as one
                out["joined"] = max(r["joined"] for r in client.run(blocks.what_ran).values())
        X = shard(s.X_train, client)                      # uint8 pixels, scaled as read
        y = shard(s.y_train, client, like=X)              # labels beside their rows
        for comm, optimizer, precision in ROUTES:
            # pixels in [0, 1] and C=0.1: every route converges, one optimum to compare
            lr = LogisticRegression(C=0.1, input_scale=1 / 255, max_iter=500, tol=1e-4, comm=comm,
                                    optimizer=optimizer, precision=precision).fit(X, y)
            assert lr.converged_, ((comm, optimizer, precision), lr.stop_reason_)
            assert lr.comm_ == comm and lr.optimizer_ == optimizer, (lr.comm_, lr.notes_)
            assert lr.precision_ == precision, lr.notes_
            out[comm, optimizer, precision] = lr.loss_
            out["joined", comm, optimizer, precision] = lr.fit_profile_.get("shards joined")
        # The int8 levels are kept while the rows live: a second fit reads the same ones
        again = LogisticRegression(C=0.1, input_scale=1 / 255, max_iter=500, tol=1e-4,
                                   optimizer="device", precision="int8").fit(X, y)
        out["int8 again"] = again.loss_
        out["join kept"] = again.fit_profile_.get("join kept", False)
        out["state kept"] = again.fit_profile_.get("state kept", False)
        out["rows kept"] = again.fit_profile_.get("rows kept", False)
        host = again.predict(Q, on_host=True)
        out["lr straight"] = placement.blocks_in_hand(host) is not None
        out["lr host"], out["lr device"] = to_host(host), to_host(again.predict(Q))
        out["kept while the rows live"] = sum(client.run(kept_with_blocks.kept).values())
        del X, y, lr, again, Q, host
        deadline = time.monotonic() + 30
        while sum(client.run(kept_with_blocks.kept).values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        out["kept after"] = sum(client.run(kept_with_blocks.kept).values())
    return out


@pytest.fixture(scope="module")
def split():
    from mgpu_dask.data import load_dataset
    from mgpu_dask.data import split as split_rows

    ds = load_dataset("digits")
    X = (ds.X.astype(np.float32) * (255 / 16)).round().astype(np.uint8)  # 8-bit pixels
    return split_rows(X, ds.y, seed=2)


@pytest.fixture(scope="module")
def one_worker(split):
    return _run(1, split)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [2, 4])
def test_workers_sharing_one_gpu_match_one_worker(n_workers, split, one_worker):
    got = _run(n_workers, split)
    for plan in ("replicate", "shard"):
        np.testing.assert_array_equal(got[plan], one_worker[plan])
        np.testing.assert_array_equal(got[plan, "host"], one_worker[plan])
    assert got["replicate", "straight"] and one_worker["replicate", "straight"]
    assert got["joined"] == n_workers and one_worker["joined"] == 0
    assert got["shard", "straight"]  # the shard's holder searched every block: no task
    assert one_worker["shard", "straight"]  # one worker holds every shard: no task
    # the shards of one GPU's workers are one shard: the GPU's rows are searched once
    assert got["shard", "copies"] == 1 and got["replicate", "copies"] == n_workers
    assert got["lr straight"] and one_worker["lr straight"]
    np.testing.assert_array_equal(got["lr host"], got["lr device"])
    for route in ROUTES:
        assert abs(got[route] - one_worker[route]) <= 1e-4 * one_worker[route], route
    # the device L-BFGS copies the shards that share its GPU into one
    for route in ROUTES[:2]:
        assert got[("joined", *route)] == n_workers and one_worker[("joined", *route)] == 0, route


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [1, 2])
def test_int8_levels_and_joins_are_kept_while_the_rows_live(n_workers, split, one_worker):
    got = one_worker if n_workers == 1 else _run(n_workers, split)
    first = got["single-host", "device", "int8"]
    assert abs(got["int8 again"] - first) <= 1e-6 * first
    # each worker's levels; the leader keeps the device routes' two joins (int8 levels,
    # fp32 rows; one worker: its own rows as they are) and their two device L-BFGS: the
    # second fit reads its rows kept, asking no holder, and starts from the kept L-BFGS;
    # KNN's searcher keeps the query blocks it joined
    assert got["kept while the rows live"] == n_workers + 2 + 2 + (n_workers > 1)
    assert got["join kept"] == (n_workers > 1)
    assert got["rows kept"] and got["state kept"]
    assert got["kept after"] == 0


def test_script_gives_the_command_the_clusters_address(tmp_path):
    """``python tests/shared_gpu.py N -- COMMAND``: the command joins that cluster (here on
    CPU: the workers see no GPU either way)."""
    script = tmp_path / "workers.py"
    script.write_text("import sys\nfrom distributed import Client\n"
                      "with Client(sys.argv[-1]) as c:\n"
                      "    print(sys.argv[-2], len(c.scheduler_info()['workers']))\n")
    here = Path(__file__).parent / "shared_gpu.py"
    proc = subprocess.run([sys.executable, str(here), "3", "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["--scheduler-address", "3"]
    assert main(["two", "--", "true"]) == 2
