"""Host rows placed through shared memory to workers on the client's host."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import digits_xy

from mgpu_dask.data import shard, split
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.parallel import shared_rows
from mgpu_dask.parallel.inputs import to_host

pytestmark = pytest.mark.skipif(not os.path.isdir(shared_rows.ROOT),
                                reason="no /dev/shm on this machine")


def _ours() -> set[str]:
    """This process's row files that tasks may name now (not those kept to write over)."""
    kept = {os.path.basename(p) for p in shared_rows._kept}
    return {p.name for p in Path(shared_rows.ROOT).glob(f"{shared_rows.PREFIX}-{os.getpid()}-*")
            } - kept


def _big_digits() -> tuple[np.ndarray, np.ndarray]:
    """Digits sixteen times over (1.8 MB of pixels): over the size that goes through files."""
    X, y = digits_xy()
    X, y = np.tile(X, (16, 1)), np.tile(y, 16)
    assert X.nbytes > shared_rows.MIN_BYTES
    return X, y


def _carried_in_graph(monkeypatch) -> None:
    monkeypatch.setattr(shared_rows, "MIN_BYTES", 1 << 62)


def test_shards_through_a_file_equal_the_rows_and_the_file_goes_with_them(process_client):
    X, _ = _big_digits()
    before = _ours()
    Xd = shard(X, process_client)
    made = _ours() - before
    assert len(made) == 1  # one file for every shard
    np.testing.assert_array_equal(to_host(Xd), X)
    part = Xd[100:200]  # a derived array keeps the blocks, and so the file
    del Xd
    gc.collect()
    assert _ours() - before == made
    np.testing.assert_array_equal(to_host(part), X[100:200])
    del part
    gc.collect()
    assert _ours() - before == set()


def test_small_arrays_travel_in_the_graph(process_client):
    X, _ = digits_xy()
    before = _ours()
    Xd = shard(X[:100], process_client)
    assert _ours() == before
    np.testing.assert_array_equal(to_host(Xd), X[:100])


def test_a_worker_that_cannot_read_the_files_gets_the_rows_in_the_graph(process_client):
    X, _ = _big_digits()
    workers = sorted(process_client.scheduler_info()["workers"])
    shared_rows._same_host[process_client] = {w: w != workers[0] for w in workers}
    try:
        before = _ours()
        Xd = shard(X, process_client)
        assert _ours() == before
        np.testing.assert_array_equal(to_host(Xd), X)
    finally:
        shared_rows._same_host.pop(process_client, None)


def test_the_probe_finds_same_host_workers(process_client):
    workers = sorted(process_client.scheduler_info()["workers"])
    shared_rows._same_host.pop(process_client, None)
    assert shared_rows.reachable(process_client, workers)
    assert shared_rows._same_host[process_client] == {w: True for w in workers}


def test_knn_fit_from_numpy_through_a_file_predicts_as_through_the_graph(process_client,
                                                                          monkeypatch):
    X, y = _big_digits()
    s = split(X, y, seed=3)
    Q = shard(s.X_test, process_client, dtype=np.float32)
    before = _ours()
    clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
    assert len(_ours() - before) == 1
    through_file = to_host(clf.predict(Q))
    _carried_in_graph(monkeypatch)
    in_graph = to_host(KNeighborsClassifier(3).fit(s.X_train, s.y_train).predict(Q))
    np.testing.assert_array_equal(through_file, in_graph)
    del clf
    gc.collect()
    assert _ours() - before == set()


@pytest.mark.slow
def test_a_lost_worker_s_copy_is_rebuilt_from_the_file(process_client):
    X, y = _big_digits()
    s = split(X, y, seed=5)
    Q = shard(s.X_test, process_client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan="replicate").fit(s.X_train, s.y_train)
    before = to_host(clf.predict(Q))
    pids = process_client.run(os.getpid)
    os.kill(pids[sorted(pids)[1]], signal.SIGKILL)
    np.testing.assert_array_equal(to_host(clf.predict(Q), timeout=120), before)


def test_files_of_ended_processes_are_swept(monkeypatch, tmp_path):
    monkeypatch.setattr(shared_rows, "ROOT", str(tmp_path))
    monkeypatch.setattr(shared_rows, "_swept", False)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = tmp_path / f"{shared_rows.PREFIX}-{ended.stdout.strip()}-abc"
    alive = tmp_path / f"{shared_rows.PREFIX}-{os.getpid()}-def"
    other = tmp_path / "someone-else"
    for path in (dead, alive, other):
        path.write_bytes(b"x")
    shared_rows._sweep()
    assert not dead.exists() and alive.exists() and other.exists()


def test_segments_of_dead_exporters_go_at_release():
    from mgpu_dask.parallel import peer_views

    token = uuid.uuid4().hex
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = Path(f"/dev/shm/mgpu_{token[:16]}_{ended.stdout.strip()}_0")
    alive = Path(f"/dev/shm/mgpu_{token[:16]}_{os.getpid()}_1")
    try:
        for path in (dead, alive):
            path.write_bytes(b"x")
        peer_views.release(token)
        assert not dead.exists() and alive.exists()
    finally:
        dead.unlink(missing_ok=True)
        alive.unlink(missing_ok=True)


@pytest.mark.parametrize("piece", [shared_rows.PIECE_BYTES, 4096 + 8])  # one range, or many
def test_rows_read_back_and_released_files_are_written_over(tmp_path, monkeypatch, piece):
    monkeypatch.setattr(shared_rows, "PIECE_BYTES", piece)
    monkeypatch.setattr(shared_rows, "ROOT", str(tmp_path))
    monkeypatch.setattr(shared_rows, "reachable", lambda client, workers: True)
    monkeypatch.setattr(shared_rows, "_kept", [])
    monkeypatch.setattr(shared_rows, "_live", set())
    monkeypatch.setattr(shared_rows, "_maps", {})
    X = np.arange(2 * shared_rows.MIN_BYTES // 8, dtype=np.float64).reshape(-1, 4)
    shared = shared_rows.share(X, client=None, workers=["w"])
    assert shared is not None and shared.nbytes == X.nbytes
    rows = shared_rows.read(shared, 3, 10)
    np.testing.assert_array_equal(rows, X[3:10])
    assert rows.flags.writeable and rows.base is not None
    np.testing.assert_array_equal(shared_rows.read(shared), X)
    path = shared.path
    del shared
    gc.collect()
    assert not os.path.exists(path) and len(shared_rows._kept) == 1  # kept, under another name
    kept = shared_rows._kept[0]
    mapping = shared_rows._maps[kept]  # with the mapping it was written through
    Z = X[::-1] * 3  # the same size: written into the kept mapping
    same = shared_rows.share(Z, client=None, workers=["w"])
    assert shared_rows._maps[same.path] is mapping and not os.path.exists(kept)
    np.testing.assert_array_equal(shared_rows.read(same), Z)
    path = same.path
    del same
    gc.collect()
    kept = shared_rows._kept[0]
    Y = X[: len(X) // 2] + 0.5  # smaller: written over the kept file, cut to its size
    again = shared_rows.share(Y, client=None, workers=["w"])
    assert shared_rows._kept == [] and not os.path.exists(kept)
    assert os.path.getsize(again.path) == Y.nbytes and len(shared_rows._maps[again.path]) == Y.nbytes
    assert mapping.closed  # the old size's mapping went
    np.testing.assert_array_equal(shared_rows.read(again), Y)
    shared_rows._remove_all()  # the process's end: every file goes, live or kept
    assert list(tmp_path.iterdir()) == [] and shared_rows._maps == {}
