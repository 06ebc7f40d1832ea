"""Batch clusters: job scripts by content, and KNN through a real local SLURM."""

from __future__ import annotations

import subprocess
import time

import dask
import numpy as np
import pytest
import slurm_local

from mgpu_dask.cluster import ClusterKind, connect, plan_cluster
from mgpu_dask.exceptions import ClusterError
from mgpu_dask.cluster.jobqueue import job_script
from mgpu_dask.cli import main

pytest.importorskip("dask_jobqueue")


def test_slurm_gpu_job_script():
    script = job_script("slurm", device="gpu", gpus_per_job=4)
    assert "#SBATCH --gres=gpu:4" in script and "#SBATCH -t 01:00:00" in script
    assert "-m dask_cuda.cli tcp://SCHEDULER-ADDRESS:8786" in script
    assert "--memory-limit" in script and "mgpu-dask-logs" in script


def test_pbs_gpu_job_script_by_content():
    # No PBS server can be installed from the package registries here, so PBS is
    # checked by the script it would submit.
    script = job_script("pbs", device="gpu", gpus_per_job=2)
    assert "#PBS -l select=1:ncpus=8:ngpus=2:mem=64GB" in script
    assert "#PBS -l walltime=01:00:00" in script and "-m dask_cuda.cli" in script
    cpu = job_script("pbs", device="cpu")
    assert "-m distributed.cli.dask_worker" in cpu and "ngpus" not in cpu


def test_plan_counts_workers_per_job():
    plan = plan_cluster(cluster="slurm", jobs=3, gpus_per_job=2, device="gpu")
    assert plan.kind is ClusterKind.SLURM and plan.n_workers == 6
    assert plan_cluster(cluster="pbs", jobs=2, device="cpu").n_workers == 2
    with pytest.raises(ClusterError, match="--jobs 0"):
        plan_cluster(cluster="slurm", jobs=0)


def test_missing_config_key_is_a_clear_error():
    section = dict(dask.config.get("jobqueue.mgpu-slurm"))
    del section["walltime"]
    with dask.config.set({"jobqueue.mgpu-slurm": section}, clear=False):
        dask.config.config["jobqueue"]["mgpu-slurm"] = section
        with pytest.raises(ClusterError, match="has no key 'walltime'"):
            job_script("slurm", device="cpu")


def test_cli_dry_run_prints_script(capsys):
    assert main(["knn", "--cluster", "slurm", "--jobs", "2", "--gpus-per-job", "4",
                 "--device", "gpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# 2 job(s) x 4 worker(s)" in out and "--gres=gpu:4" in out
    assert main(["knn", "--dry-run"]) == 2


def test_no_batch_system_reachable(tmp_path, monkeypatch):
    reason = slurm_local.available()
    if reason:
        pytest.skip(reason)
    conf = slurm_local.write_conf(tmp_path, port=16999, dport=16998)  # nothing listens there
    monkeypatch.setenv("SLURM_CONF", str(conf))
    started = time.perf_counter()
    with pytest.raises(ClusterError, match="SLURM does not answer"):
        with connect(cluster="slurm", jobs=1, device="cpu", timeout=20, dashboard_address=":0"):
            pass
    assert time.perf_counter() - started < 60


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = slurm_local.available()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    conf, started = slurm_local.start(root)
    try:
        yield conf
    finally:
        slurm_local.stop(root, conf, started)


@pytest.fixture
def cpu_jobs(slurm, tmp_path, monkeypatch):
    """Small CPU jobs on the local SLURM."""
    monkeypatch.setenv("SLURM_CONF", str(slurm))
    section = {**dask.config.get("jobqueue.mgpu-slurm"), "cores": 1, "memory": "2GB",
               "processes": 1, "walltime": "00:10:00", "death-timeout": 30,
               "log-directory": str(tmp_path / "logs"), "gpus-per-job": 0}
    with dask.config.set({"jobqueue.mgpu-slurm": section}):
        yield slurm


def _worker_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "distributed.cli.dask_worker"], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def _drained(conf, seconds=30.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not slurm_local.queue(conf) and not _worker_processes():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_knn_through_slurm_cluster(cpu_jobs, tmp_path, capsys):
    out = tmp_path / "knn.json"
    code = main(["knn", "--cluster", "slurm", "--jobs", "2", "--device", "cpu",
                 "--dataset", "digits", "--repeats", "1", "--quiet", "--timeout", "120",
                 "--dashboard-address", ":0", "--json", str(out),
                 "--report", str(tmp_path / "report.html")])
    assert code == 0, capsys.readouterr().err
    import json

    result = json.loads(out.read_text())
    assert result["cluster"] == "slurm" and result["workers"] == 2
    assert result["accuracy"] > 0.97
    assert (tmp_path / "report.html").stat().st_size > 1000
    assert _drained(cpu_jobs), f"left over: jobs {slurm_local.queue(cpu_jobs)}, " \
                               f"processes {_worker_processes()}"


@pytest.mark.slow
def test_jobs_that_never_start_time_out_and_are_cancelled(cpu_jobs):
    section = {**dask.config.get("jobqueue.mgpu-slurm"),
               "job-extra-directives": ["--begin=now+1hour"]}
    with dask.config.set({"jobqueue.mgpu-slurm": section}):
        started = time.perf_counter()
        with pytest.raises(ClusterError, match=r"did not start in time.*cancelled job\(s\) \d+"):
            with connect(cluster="slurm", jobs=1, device="cpu", timeout=10,
                         dashboard_address=":0"):
                pass
    assert time.perf_counter() - started < 60
    assert _drained(cpu_jobs), f"left over: {slurm_local.queue(cpu_jobs)}"


def test_refused_job_is_a_clear_error(cpu_jobs):
    section = {**dask.config.get("jobqueue.mgpu-slurm"), "memory": "100TB"}
    with dask.config.set({"jobqueue.mgpu-slurm": section}):
        started = time.perf_counter()
        with pytest.raises(ClusterError, match="SLURM refused the job: .*not available"):
            with connect(cluster="slurm", jobs=1, device="cpu", timeout=60, dashboard_address=":0"):
                pass
    assert time.perf_counter() - started < 30
    assert _drained(cpu_jobs)


@pytest.mark.slow
def test_estimator_on_slurm_workers(cpu_jobs):
    from mgpu_dask.data import load_dataset, shard, split
    from mgpu_dask.knn import KNeighborsClassifier

    ds = load_dataset("digits")
    s = split(ds.X, ds.y)
    with connect(cluster="slurm", jobs=1, device="cpu", timeout=120, dashboard_address=":0") as rc:
        with rc.client.as_current():
            clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
            acc = clf.score(shard(s.X_test, rc.client, dtype=np.float32), s.y_test)
    assert acc > 0.97
    assert _drained(cpu_jobs)


@pytest.mark.slow
def test_workflow_batch_script_in_one_allocation(cpu_jobs, tmp_path):
    """deploy/slurm/workflow.sbatch: scheduler, workers and a workflow inside one job."""
    import json
    import os
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: batch-test\ntask: knn\n"
                    "options: {dataset: digits, k: 3, repeats: 1, device: cpu}\n"
                    "sweep: {fraction: [0.5, 1]}\n")
    results = tmp_path / "results.json"
    env = {**os.environ, "SLURM_CONF": str(cpu_jobs), "PYTHON": sys.executable,
           "MGPU_DASK_WORKER": f"{sys.executable} -m distributed.cli.dask_worker --nthreads 1",
           "MGPU_DASK_DASHBOARD": ":0", "PYTHONPATH": str(repo)}
    proc = subprocess.run(
        ["sbatch", "--wait", "--gres=none", "--cpus-per-task=1", "--time=00:10:00",
         f"--chdir={tmp_path}", str(repo / "deploy/slurm/workflow.sbatch"), str(flow), str(results)],
        capture_output=True, text=True, env=env, timeout=300)
    logs = "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("mgpu-dask-workflow-*.out"))
    assert proc.returncode == 0, proc.stderr + logs
    payload = json.loads(results.read_text())
    assert payload["workflow"] == "batch-test" and len(payload["runs"]) == 2
    assert all(r["accuracy"] > 0.95 and r["cluster"] == "address" for r in payload["runs"])
    assert [r["options"]["fraction"] for r in payload["runs"]] == [0.5, 1]
    assert _drained(cpu_jobs), f"left over: {slurm_local.queue(cpu_jobs)} {_worker_processes()}"
    assert not list(tmp_path.glob(".mgpu-dask-scheduler-*"))


def test_pbs_batch_script_by_content():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "deploy/pbs/workflow.pbs").read_text()
    assert "#PBS -l select=1:ncpus=16:ngpus=4" in text and "pbsdsh" in text
    assert "mgpu_dask.run workflow" in text and "--scheduler-file" in text
    assert subprocess.run(["bash", "-n", "-c", text]).returncode == 0
