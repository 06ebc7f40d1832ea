"""First contact: the first run on a machine says it compiles and shows the compile as a
phase, a later one does not; progress and summary agree; jobs share a cluster cleanly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import REPO_ROOT, RunningCommand

from mgpu_dask.cli import main

pytestmark = pytest.mark.slow


def _cli(*argv: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mgpu_dask.run", *argv], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_a_first_run_compiles_in_a_phase_of_its_own_and_a_second_run_does_not(task, tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "CUPY_CACHE_DIR": str(tmp_path / "cupy"), "MGPU_DASK_CACHE_DIR": str(tmp_path)}
    runs = []
    for i in (1, 2):
        out = tmp_path / f"run{i}.json"
        proc = _cli(task, "--dataset", "digits", "--workers", "1", "--device", "cpu",
                    "--repeats", "1", "--dashboard-address", ":0", "--json", str(out), env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append((json.loads(out.read_text()), proc.stderr))
    (first, first_err), (second, second_err) = runs
    assert "compile" in first["cold"] and first["kernels"]["compiled"] > 0
    # the warm-up compiled every kernel the run used: none after it, in either run
    assert first["kernels"]["compiled after the warm-up"] == {}
    assert second["kernels"]["compiled after the warm-up"] == {}
    assert all(sigs for sigs in first["kernels"]["by the warm-up"].values())
    said = [line for line in first_err.splitlines() if "first run on this machine" in line]
    assert len(said) == 1 and str(tmp_path / "numba") in said[0]
    # the line comes before the compile's own progress line
    assert first_err.index(said[0]) < first_err.index("  compile: ")
    assert "compile" not in second["cold"] and "warm-up" in second["cold"]
    assert second["kernels"] == {**second["kernels"], "compiled": 0, "cached": True}
    assert "first run on this machine" not in second_err
    assert any((tmp_path / "numba").rglob("*.nbi"))  # the cache is where we said


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_on_a_gpu_the_warm_up_compiles_all_that_the_run_compiles(task, tmp_path):
    """Empty caches, GPU workers: our Numba kernels and CuPy's are all compiled by the
    warm-up, none after it (CuPy's counted through kernels.compiled.track_cupy)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update({"NUMBA_CACHE_DIR": str(tmp_path / "numba"),
                "CUPY_CACHE_DIR": str(tmp_path / "cupy"), "MGPU_DASK_CACHE_DIR": str(tmp_path)})
    out = tmp_path / "run.json"
    proc = _cli(task, "--dataset", "digits", "--workers", "1", "--device", "gpu",
                "--repeats", "1", "--dashboard-address", ":0", "--json", str(out), env=env,
                timeout=480)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kernels = json.loads(out.read_text())["kernels"]
    assert kernels["compiled after the warm-up"] == {}
    by_cupy = kernels.get("cupy kernels by the warm-up")
    assert by_cupy and all(k["tracked"] and k["compiled"] > 0 for k in by_cupy), kernels
    assert any(sig.startswith("cupy:") for sigs in kernels["by the warm-up"].values()
               for sig in sigs)


def test_progress_lines_and_the_summary_agree_on_every_phase(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["knn", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--repeats", "1", "--dashboard-address", ":0", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    progress = dict(re.findall(r"^  ([a-z+ -]+): ([0-9.]+) s$", captured.err, re.M))
    cold = json.loads(out.read_text())["cold"]
    summary_line = next(line for line in captured.out.splitlines() if line.startswith("cold:"))
    for name in ("load", "cluster start", "transfer", "distances+top-k", "vote"):
        assert name in progress, (name, captured.err)
        assert progress[name] == f"{cold[name]:.3f}"
        assert f"{name} {cold[name]:.3f}s" in summary_line
    assert float(progress["cluster start"]) > 0.05  # the whole start, not the last wait


def test_a_bad_value_is_refused_before_anything_loads_or_starts(capsys, monkeypatch):
    import mgpu_dask.cluster.starting as starting
    import mgpu_dask.data.datasets as datasets

    def never(*args, **kwargs):
        raise AssertionError("started or loaded before the options were checked")

    monkeypatch.setattr(starting.StartingCluster, "__init__", never)
    monkeypatch.setattr(datasets, "load_dataset", never)
    for argv, words in ((["knn", "--k", "0"], "--k 0"),
                        (["knn", "--workers", "-1"], "--workers -1"),
                        (["knn", "--fraction", "0"], "--fraction 0"),
                        (["logreg", "--C", "-1"], "C=-1.0"),
                        (["logreg", "--classes", "3"], "--classes 3"),
                        (["knn", "--dataset", "mnist-deformed", "--copies", "0"], "--copies 0"),
                        (["knn", "--memory-budget", "lots"], "--memory-budget 'lots'")):
        started = time.perf_counter()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and words in err and "\n" not in err, err
        assert time.perf_counter() - started < 1.0


def test_the_cluster_is_asked_for_before_the_jobs_heavy_imports(tmp_path):
    """A run asks for its cluster once its options are checked, before it imports Dask's
    arrays, distributed's client side of sharding, scikit-learn or its job's modules:
    they load while the workers start."""
    heavy = ("dask.array", "mgpu_dask.data.sharding", "sklearn", "mgpu_dask.jobs.knn",
             "mgpu_dask.jobs.logreg")
    code = (
        "import json, sys\n"
        "from mgpu_dask.cli import main\n"
        "from mgpu_dask.cluster.starting import StartingCluster\n"
        "from mgpu_dask.exceptions import ClusterError\n"
        "seen = {}\n"
        "def asked(self, *args, **kwargs):\n"
        f"    seen.update({{m: m in sys.modules for m in {heavy!r}}})\n"
        "    raise ClusterError('stopped here by the test')\n"
        "StartingCluster.__init__ = asked\n"
        "for task in ('knn', 'logreg'):\n"
        "    seen.clear()\n"
        "    assert main([task, '--device', 'cpu', '--workers', '1', '--dataset', 'synthetic',\n"
        "                 '--quiet']) == 2\n"
        "    print(json.dumps(seen))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip().splitlines()
    assert len(out) == 2
    for line in out:
        imported = json.loads(line)
        assert set(imported) == set(heavy) and not any(imported.values()), imported


def test_the_client_never_imports_what_only_the_workers_run(tmp_path):
    """A run's client (and the scheduler in its process) imports neither the workers'
    side of a fit (Numba, the L-BFGS and its kernels, the leader, the warm-up) nor
    scipy.stats: the client imports on one core with the cluster's start."""
    worker_side = ("numba", "mgpu_dask.logreg.leader", "mgpu_dask.logreg.solvers",
                   "mgpu_dask.logreg.warmup", "mgpu_dask.knn.warmup",
                   "mgpu_dask.kernels.lbfgs.cuda", "scipy.stats._stats_py")
    code = (
        "import json, sys\n"
        "from mgpu_dask.cli import main\n"
        "assert main(sys.argv[1:]) == 0\n"
        f"print(json.dumps({{m: m in sys.modules for m in {worker_side!r}}}))\n")
    env = {**os.environ, "MGPU_DASK_CACHE_DIR": str(tmp_path)}
    small = ["--device", "cpu", "--workers", "1", "--dataset", "synthetic", "--fraction",
             "0.05", "--repeats", "1", "--quiet"]
    for task in (["logreg", "--max-iter", "5"], ["knn"]):
        out = subprocess.run([sys.executable, "-c", code, *task, *small], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=True,
                             env=env).stdout.strip().splitlines()[-1]
        imported = json.loads(out)
        assert not any(imported.values()), (task, imported)


def test_the_worker_fork_server_starts_before_numpy_is_imported(tmp_path):
    """The CLI starts the fork server (whose imports are a cold run's longest wait) as
    soon as it has parsed the command: neither numpy nor Dask's arrays are imported by
    then."""
    code = (
        "import json, sys\n"
        "import mgpu_dask.cluster.worker_start as worker_start\n"
        "def early(device):\n"
        "    print(json.dumps({m: m in sys.modules for m in ('numpy', 'dask.array')}))\n"
        "    raise SystemExit(0)\n"
        "worker_start.start_early = early\n"
        "from mgpu_dask.cli import main\n"
        "main(['knn', '--workers', '1', '--device', 'gpu'])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert json.loads(out) == {"numpy": False, "dask.array": False}


def _worker_pids(command: RunningCommand) -> list[int]:
    """The worker processes of a running CPU ``cluster`` command (spawned by its nannies)."""
    procs = psutil.Process(command.proc.pid).children(recursive=True)
    return [p.pid for p in procs if "spawn_main" in " ".join(p.cmdline())]


def test_three_jobs_share_one_cluster_and_survive_a_worker_loss(tmp_path):
    """Two KNN jobs and a logistic regression at once against one `cluster`: each ends with
    the predictions it gives alone, with no warning, also when a worker is killed while
    they run (the cluster's nanny replaces it, each job rebuilds what it lost)."""
    env = {**os.environ, "MGPU_DASK_CACHE_DIR": str(tmp_path)}
    jobs = {"knn-a": ["knn", "--k", "3"], "knn-b": ["knn", "--k", "5", "--weights", "uniform"],
            "logreg": ["logreg", "--max-iter", "60"]}
    cluster = RunningCommand("--workers", "2")
    address = cluster.lines["scheduler"]
    try:
        alone = {}
        for name, argv in jobs.items():
            out = tmp_path / f"alone-{name}.json"
            proc = _cli(*argv, "--dataset", "digits", "--scheduler-address", address,
                        "--repeats", "1", "--quiet", "--json", str(out), env=env)
            assert proc.returncode == 0, proc.stderr[-2000:]
            alone[name] = json.loads(out.read_text())["predictions_sha256"]
        for kill in (False, True):
            procs = {name: subprocess.Popen(
                [sys.executable, "-m", "mgpu_dask.run", *argv, "--dataset", "digits",
                 "--scheduler-address", address, "--repeats", "150" if kill else "20",
                 "--json", str(tmp_path / f"{name}-{kill}.json")], cwd=REPO_ROOT, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name, argv in jobs.items()}
            errors = {name: [] for name in procs}
            readers = [threading.Thread(target=lambda p, e: e.extend(p.stderr), args=(p, errors[n]),
                                        daemon=True) for n, p in procs.items()]
            for reader in readers:
                reader.start()
            if kill:  # once every job is past its data's placement: predicting, fitting
                deadline = time.time() + 120
                while not all(any(line.startswith("[4/4]") for line in list(e))
                              for e in errors.values()):
                    assert time.time() < deadline, errors
                    time.sleep(0.05)
                workers = _worker_pids(cluster)
                assert workers, "no worker process found to kill"
                psutil.Process(workers[0]).kill()
                assert all(p.poll() is None for p in procs.values())  # killed during them
            for name, proc in procs.items():
                proc.wait(timeout=300)
                readers[list(procs).index(name)].join(timeout=30)
                err = "".join(errors[name])
                assert proc.returncode == 0, (name, kill, err[-2000:])
                assert "Warning" not in err, (name, err)
                result = json.loads((tmp_path / f"{name}-{kill}.json").read_text())
                assert result["predictions_sha256"] == alone[name], (name, kill)
    finally:
        cluster.interrupt()
