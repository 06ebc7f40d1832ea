"""Worker functions named by the client (parallel.by_name): the client and the scheduler
import nothing of them, a worker gets the function itself."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from mgpu_dask.parallel.by_name import WorkerFunction


def _module(tmp_path, name: str) -> None:
    """A module that says where it was imported (its process id, appended to a file)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import os
        with open({str(tmp_path / (name + '.imported'))!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        def triple(x, plus=0):
            return 3 * x + plus
    """))


def test_a_name_must_have_a_module_and_a_function():
    for bad in ("triple", ".triple", "module."):
        with pytest.raises(ValueError, match="package.module.function"):
            WorkerFunction(bad)


def test_unpickled_as_the_function_where_its_module_is_loaded():
    restored = pickle.loads(pickle.dumps(WorkerFunction("json.dumps")))
    assert restored is json.dumps


def test_unpickled_as_a_name_where_nothing_runs_it(tmp_path, monkeypatch):
    """A process without a Dask worker (the scheduler's) unpickles the name and imports
    nothing; called, it imports the module and runs the function.  Where a worker runs
    (here: one of another test's clusters of threads), it unpickles the function."""
    import weakref

    from distributed.worker import Worker

    _module(tmp_path, "named_here")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "named_here", raising=False)
    monkeypatch.setattr(Worker, "_instances", weakref.WeakSet())  # no worker in this process
    restored = pickle.loads(pickle.dumps(WorkerFunction("named_here.triple")))
    assert isinstance(restored, WorkerFunction) and "named_here" not in sys.modules
    assert restored(2, plus=1) == 7
    assert "named_here" in sys.modules

    monkeypatch.delitem(sys.modules, "named_here")
    worker = type("Running", (), {})()
    Worker._instances = weakref.WeakSet([worker])  # one worker runs here
    restored = pickle.loads(pickle.dumps(WorkerFunction("named_here.triple")))
    assert not isinstance(restored, WorkerFunction) and restored(1) == 3


def test_the_client_and_its_scheduler_never_import_a_worker_function(tmp_path):
    """Submitted to a local cluster of worker processes (the scheduler in the client's
    process, as the CLI runs it): the result is the function's, the module is imported
    by the worker alone, once, as its task arrived."""
    _module(tmp_path, "named_remote")
    code = textwrap.dedent("""
        import json, os, sys
        from distributed import Client, LocalCluster
        from mgpu_dask.parallel.by_name import WorkerFunction
        if __name__ == "__main__":
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                f = WorkerFunction("named_remote.triple")
                out = [client.submit(f, i, plus=1, pure=False).result() for i in range(3)]
                ran = client.run(f, 5)
                print(json.dumps([out, list(ran.values()), os.getpid(),
                                  "named_remote" in sys.modules]))
    """)
    script = tmp_path / "submit.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180, check=True, env=env, cwd=tmp_path).stdout
    results, ran, client_pid, in_client = json.loads(out.strip().splitlines()[-1])
    assert results == [1, 4, 7] and ran == [15]
    assert not in_client
    imported = (tmp_path / "named_remote.imported").read_text().split()
    assert len(imported) == 1 and int(imported[0]) != client_pid
