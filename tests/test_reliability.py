"""Worker loss, timeouts, interruption and memory: each case ends cleanly and is listed
in docs/reliability.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import faults
from conftest import digits_xy, shm_segments

from mgpu_dask.data import shard, split
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.parallel.inputs import to_host
from mgpu_dask.logreg import LogisticRegression
from mgpu_dask.cli import main

pytestmark = pytest.mark.slow


def _kill_one_worker(client) -> str:
    pids = client.run(os.getpid)
    victim = sorted(pids)[1]
    os.kill(pids[victim], signal.SIGKILL)
    return victim


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_knn_worker_killed_between_fit_and_predict(process_client, plan):
    s = split(*digits_xy(), seed=4)
    Q = shard(s.X_test, process_client, dtype=np.float32)
    clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
    before = to_host(clf.predict(Q))
    _kill_one_worker(process_client)
    after = to_host(clf.predict(Q), timeout=120)  # lost shards are rebuilt from their slices
    np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("comm, victim", [("actors", "other"), ("single-host", "other"),
                                          ("single-host", "self")])
def test_logreg_worker_killed_during_fit(process_client, comm, victim, tmp_path):
    """Actors: the lost shards are rebuilt and new actors take them.  Single-host: a
    killed exporter's shard stays mapped by the fitting worker; a killed fitting
    worker's task reruns on another, which maps the dead one's shard."""
    s = split(*digits_xy(), seed=4)
    X = shard(s.X_train, process_client, dtype=np.float32, scale=1 / 16)
    before = shm_segments()
    reference = LogisticRegression(C=1.0, max_iter=400, tol=1e-7, comm="actors").fit(X, s.y_train)
    marker = tmp_path / "killed"
    faults.by_value()
    process_client.run(faults.kill_during_fit, sorted(process_client.run(os.getpid).values()),
                       victim, str(marker))
    clf = LogisticRegression(C=1.0, max_iter=400, tol=1e-7, comm=comm)
    clf.fit(X, s.y_train)
    assert marker.exists(), "no worker was killed during the fit"
    if comm == "actors":
        assert clf.n_recoveries_ >= 1
    assert abs(clf.loss_ - reference.loss_) / reference.loss_ < 1e-4
    assert shm_segments() <= before, "shared segments left behind"
    Xt = shard(s.X_test, process_client, dtype=np.float32, scale=1 / 16)
    assert abs(clf.score(Xt, s.y_test) - reference.score(Xt, s.y_test)) < 0.01



def test_wait_past_timeout_is_a_timeout_error(client):
    import dask.array as da

    def slow(block):
        time.sleep(5)
        return block

    x = da.ones((4, 2), chunks=2).map_blocks(slow, dtype=float)
    started = time.perf_counter()
    with pytest.raises(TimeoutError, match="did not arrive within"):
        to_host(x, timeout=1)
    assert time.perf_counter() - started < 4


def test_cli_timeout_is_one_line_and_exit_3(monkeypatch, capsys):
    import mgpu_dask.cli.tasks as run

    def stuck(args):
        raise TimeoutError("results did not arrive within 1 s")

    monkeypatch.setattr(run, "run_task", stuck)
    assert main(["knn", "--dataset", "digits", "--timeout", "1"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: a wait timed out") and "--timeout" in err and "\n" not in err


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_mid_run_leaves_no_file_and_no_process(tmp_path):
    marker = f"MGPU_TEST_MARKER={uuid.uuid4().hex}"
    key, value = marker.split("=")
    out = tmp_path / "result.json"
    env = {**os.environ, key: value, "MGPU_DASK_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mgpu_dask.run", "knn", "--dataset", "synthetic",
         "--fraction", "0.4", "--workers", "2", "--device", "cpu", "--repeats", "50",
         "--dashboard-address", ":0", "--json", str(out), "--report", str(tmp_path / "r.html")],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:  # wait until the run is in its predict phase
        if line.startswith("[4/4]"):
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143, rest
    assert "terminated (SIGTERM)" in rest
    assert not out.exists() and not (tmp_path / "r.html").exists()
    assert not list(tmp_path.glob(".*part*"))
    deadline = time.time() + 20
    while _processes_with(marker) and time.time() < deadline:
        time.sleep(0.5)
    assert _processes_with(marker) == [], "orphan worker processes"


def test_gpu_out_of_memory_becomes_a_clear_error():
    from mgpu_dask.exceptions import DataError
    from mgpu_dask.knn.blocks import guarded as _guarded

    class OutOfMemoryError(Exception):  # the name CuPy's error has
        pass

    def boom(Qb, Tb, *args, **kwargs):
        raise OutOfMemoryError("out of memory allocating 14 GB")

    with pytest.raises(DataError, match="GPU out of memory .* 7 queries with 9 training rows"):
        _guarded(boom, np.zeros((7, 2)), np.zeros((9, 2)))


def test_missing_optional_backend(monkeypatch):
    import builtins

    from mgpu_dask.exceptions import BackendUnavailableError
    from mgpu_dask.cluster.jobqueue import _cluster_class

    real_import = builtins.__import__

    def no_jobqueue(name, *args, **kwargs):
        if name == "dask_jobqueue":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jobqueue)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'mgpu-dask\[hpc\]'"):
        _cluster_class("slurm")


def test_bad_input_after_the_cluster_started_is_one_line_and_no_process(tmp_path):
    """The CLI starts its cluster on a thread before it loads the data: bad data found
    then (a data set not in --data-dir) is still one line and exit 2, nothing written,
    and the cluster it had started is shut down (no worker process left)."""
    marker = f"MGPU_TEST_MARKER={uuid.uuid4().hex}"
    key, value = marker.split("=")
    out = tmp_path / "result.json"
    env = {**os.environ, key: value, "MGPU_DASK_CACHE_DIR": str(tmp_path / "cache"),
           "DASK_MGPU_DASK__DATA__DOWNLOAD": "False"}
    proc = subprocess.run(
        [sys.executable, "-m", "mgpu_dask.run", "knn", "--dataset", "mnist", "--data-dir",
         str(tmp_path), "--workers", "2", "--device", "cpu", "--dashboard-address", ":0",
         "--quiet", "--json", str(out)], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: mnist files not found") and proc.stderr.count("\n") == 1
    assert not out.exists()
    deadline = time.time() + 20
    while _processes_with(marker) and time.time() < deadline:
        time.sleep(0.5)
    assert _processes_with(marker) == [], "orphan worker processes"


_LOGS_WHILE_CLOSING = """
import logging
from distributed import WorkerPlugin
from mgpu_dask.cluster import connect

class Loud(WorkerPlugin):
    def setup(self, worker):
        logging.getLogger("distributed.worker").error("MARK-RUNNING")

    def teardown(self, worker):  # a worker tears its plugins down while it closes
        logging.getLogger("distributed.worker").error("MARK-CLOSING")

with connect(2, device="cpu", dashboard_address=":0") as rc:
    rc.client.register_plugin(Loud())
print("closed")
"""


def test_workers_of_a_local_cluster_log_nothing_while_they_close(tmp_path):
    """A local cluster's workers write to the user's terminal: an error they log while
    running gets there, one logged while they close (a heartbeat in flight when the
    connections closed, in a CI run) does not, so the CLI's last line stays its own."""
    proc = subprocess.run([sys.executable, "-c", _LOGS_WHILE_CLOSING], capture_output=True,
                          text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "MGPU_DASK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0 and proc.stdout == "closed\n", proc.stderr
    assert proc.stderr.count("MARK-RUNNING") == 2, proc.stderr
    assert "MARK-CLOSING" not in proc.stderr


def test_cluster_that_cannot_start_is_one_line(monkeypatch, capsys):
    """A start that fails on the cluster thread (GPUs asked for, none here) reaches the
    user as connect's one-line error, exit 2."""
    monkeypatch.setenv("MGPU_DASK_FORCE_CPU", "1")
    from mgpu_dask.config import environment as _compat

    _compat.visible_gpus.cache_clear()
    try:
        assert main(["knn", "--dataset", "digits", "--device", "gpu", "--quiet"]) == 2
    finally:
        _compat.visible_gpus.cache_clear()
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no NVIDIA GPU" in err and "\n" not in err
