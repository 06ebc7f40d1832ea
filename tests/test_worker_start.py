"""Local workers forked from the fork server (mgpu_dask.cluster.worker_start), on CPU workers."""

from __future__ import annotations

import os

import dask
import numpy as np
import pytest
from conftest import digits_xy

from mgpu_dask.cluster import worker_start
from mgpu_dask.cluster import connect
from mgpu_dask.exceptions import ClusterError
from mgpu_dask.knn import KNeighborsClassifier


def _worker_facts() -> dict:
    import sys

    return {"ppid": os.getppid(), "omp": os.environ.get("OMP_NUM_THREADS"),
            "preloaded": "mgpu_dask.cluster.worker_imports" in sys.modules}


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


def test_server_environment_before_distributed_is_imported():
    """The CLI starts the server before it imports distributed: Dask's pre-spawn
    environment (OMP_NUM_THREADS=1, ...) is read from distributed's YAML all the same."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from mgpu_dask.cluster.worker_start import _pre_spawn_environ; "
            "env = _pre_spawn_environ(); print(json.dumps([env, 'distributed' in sys.modules]))")
    env, imported = json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                              capture_output=True, text=True).stdout)
    assert not imported
    assert env["OMP_NUM_THREADS"] == "1" and env["MALLOC_TRIM_THRESHOLD_"] == "65536"


def _lean_and_plain(function: str, body: str, first: object = None) -> dict[bool, tuple]:
    """``body`` (printing a JSON pair) run in a fresh interpreter after the lean import
    ``function`` of ``mgpu_dask.config.environment`` and without it, ``first`` (a
    folder) ahead on its path; ``{True: pair, False: pair}``."""
    import json
    import subprocess
    import sys

    env = dict(os.environ)
    if first is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(first), *sys.path])
    head = f"import json, sys; from mgpu_dask.config.environment import {function}; "
    return {flag: tuple(json.loads(subprocess.run(
        [sys.executable, "-c", head + (f"{function}(); " if flag else "") + body], check=True,
        capture_output=True, text=True, env=env).stdout)) for flag in (True, False)}


def test_lean_dask_array_import_leaves_xarray_importable(tmp_path):
    """import_dask_array (the CLI's and the fork server's) keeps dask.array from importing
    an installed xarray (with pandas: half a second of a cold run), and a later
    ``import xarray`` still works; without the lean import dask.array takes it."""
    fake = tmp_path / "xarray"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '2099.1.0'\n"
                                      "DataArray = type('DataArray', (), {})\n")
    meta = tmp_path / "xarray-2099.1.0.dist-info"  # dask looks for the distribution first
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: xarray\nVersion: 2099.1.0\n")
    code = ("import dask.array.core as core; during = core.xr is not None; "
            "import xarray; print(json.dumps([during, xarray.__file__]))")
    for lean, (during, where) in _lean_and_plain("import_dask_array", code,
                                                 tmp_path).items():
        assert during is not lean and where.startswith(str(fake))


def test_dask_keeps_the_server_preload_and_imports_nothing_for_it(tmp_path):
    """A nanny asking for a ``forkserver`` context makes Dask import pandas (and the rest
    of its optional packages) in the client to preload a server; ours is already running
    with its own preload, so that import would only delay the first worker, and would
    replace our preload if the server were ever restarted."""
    import json
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(
        "import json, sys\n"
        "import dask\n"
        "from multiprocessing import forkserver\n"
        "from mgpu_dask.cluster import connect\n"
        "if __name__ == '__main__':\n"
        "    with dask.config.set({'mgpu-dask.cluster.worker-start': 'forkserver'}):\n"
        "        with connect(1, device='cpu', dashboard_address=':0', timeout=60) as rc:\n"
        "            assert rc.client.submit(sum, [1, 2]).result() == 3\n"
        "    print(json.dumps(['pandas' in sys.modules,\n"
        "                      forkserver._forkserver._preload_modules]))\n")
    out = subprocess.run([sys.executable, str(script)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    pandas_imported, preload = json.loads(out.strip().splitlines()[-1])
    assert preload == [worker_start.SERVER_MODULE]
    assert not pandas_imported


def test_lean_dask_array_import_leaves_scipy_fftpack_out():
    """dask.array.fft imports SciPy's legacy fftpack; the lean import leaves it out, and a
    later ``import scipy.fftpack`` still works."""
    import scipy.fftpack

    code = ("import dask.array; during = 'scipy.fftpack' in sys.modules; "
            "import scipy.fftpack as s; print(json.dumps([during, s.__file__]))")
    for lean, (during, where) in _lean_and_plain("import_dask_array", code).items():
        assert during is not lean and where == scipy.fftpack.__file__


def test_lean_dask_array_import_leaves_cupy_sparse_out(tmp_path):
    """dask.array registers CuPy's sparse matrices as chunks when cupyx is importable;
    the lean import leaves them (and SciPy's sparse package) unimported, and a later
    ``import cupyx.scipy.sparse`` still works."""
    sparse = tmp_path / "cupyx" / "scipy" / "sparse"
    sparse.mkdir(parents=True)
    for folder in (tmp_path / "cupyx", tmp_path / "cupyx" / "scipy"):
        (folder / "__init__.py").write_text("")
    (sparse / "__init__.py").write_text("spmatrix = type('spmatrix', (), {})\n")
    code = ("import dask.array; during = 'cupyx.scipy.sparse' in sys.modules; "
            "import cupyx.scipy.sparse as s; print(json.dumps([during, s.__file__]))")
    for lean, (during, where) in _lean_and_plain("import_dask_array", code,
                                                 tmp_path).items():
        assert during is not lean and where.startswith(str(tmp_path))


def test_lean_scikit_learn_import_leaves_pandas_out(tmp_path):
    """scikit-learn imports pandas when it can; the CLI's lean import of sklearn.base
    leaves it out, and a later ``import pandas`` still works."""
    fake = tmp_path / "pandas"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '2099.1.0'\n")
    code = ("import sklearn.base; during = 'pandas' in sys.modules; "
            "import pandas; print(json.dumps([during, pandas.__file__]))")
    for lean, (during, where) in _lean_and_plain("import_scikit_learn", code,
                                                 tmp_path).items():
        assert during is not lean and where.startswith(str(fake))


def test_lean_scikit_learn_import_defers_scipy_stats():
    """sklearn.base imports scipy.stats (most of its import) for functions that use it
    later; after the CLI's lean import it has not run, and runs on its first use."""
    code = ("import sklearn.base; during = 'scipy.stats._stats_py' in sys.modules; "
            "from sklearn.utils.fixes import _mode; import numpy as np; "
            "print(json.dumps([during, _mode(np.array([[1, 2], [1, 3]])).mode.tolist()]))")
    for lean, (during, mode) in _lean_and_plain("import_scikit_learn", code).items():
        assert during is not lean and mode == [[1, 2]]


def test_a_module_imported_on_first_use_runs_once_when_used(tmp_path, monkeypatch):
    """import_on_first_use: ``import`` finds the module without running it; the first
    attribute asked for runs it, once; one that fails to run is gone from sys.modules,
    as after a failed import."""
    import importlib
    import sys

    from mgpu_dask.config.environment import import_on_first_use

    package = tmp_path / "later_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "slow.py").write_text(
        "import builtins\n"
        "builtins.later_pkg_runs = getattr(builtins, 'later_pkg_runs', 0) + 1\n"
        "from .part import value\n")
    (package / "part.py").write_text("value = 41 + 1\n")
    (package / "broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    monkeypatch.setattr(builtins, "later_pkg_runs", 0, raising=False)
    import_on_first_use("later_pkg.slow")
    slow = importlib.import_module("later_pkg.slow")
    import later_pkg

    assert later_pkg.slow is slow and builtins.later_pkg_runs == 0
    assert slow.value == 42 and builtins.later_pkg_runs == 1
    assert importlib.import_module("later_pkg.slow").value == 42
    assert builtins.later_pkg_runs == 1
    import_on_first_use("later_pkg.broken")
    broken = importlib.import_module("later_pkg.broken")
    with pytest.raises(RuntimeError, match="broken on purpose"):
        broken.anything
    assert "later_pkg.broken" not in sys.modules
    for name in ("later_pkg", "later_pkg.slow", "later_pkg.part"):
        sys.modules.pop(name, None)


def test_a_workers_first_fits_and_predicts_import_no_scikit_learn():
    """What the estimators send to the workers (the finiteness check of a KNN fit, labels
    decoded, rows copied to a GPU) is defined where scikit-learn is not imported: a
    worker's first fit and predict do not spend its import (a second or more), as they
    did while those functions lived beside the estimators' scikit-learn checks."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from mgpu_dask import KNeighborsClassifier, LogisticRegression

    def _heavy_imports() -> list[str]:  # local: sent by value, not as this test module
        import sys

        return sorted(m for m in ("sklearn", "scipy.stats") if m in sys.modules)

    rng = np.random.default_rng()
    X = da.from_array(rng.standard_normal((400, 8)).astype(np.float32), chunks=200)
    y = da.from_array(np.array(["a", "b", "c"])[rng.integers(0, 3, 400)], chunks=200)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert list(client.run(_heavy_imports).values()) == [[]]
        knn = KNeighborsClassifier(5).fit(X, y)
        assert set(knn.predict(X[:50]).compute()) <= {"a", "b", "c"}
        lr = LogisticRegression(max_iter=20).fit(X, y)
        assert set(lr.predict(X[:50]).compute()) <= {"a", "b", "c"}
        assert list(client.run(_heavy_imports).values()) == [[]]


def test_the_device_loops_modules_leave_scipy_linalg_unloaded():
    """A worker that leads a device fit imports these modules; SciPy's BLAS belongs to the
    host loop alone and loads where that runs (a few tenths of a second a worker
    otherwise), and the host loop still finds it."""
    import subprocess
    import sys

    code = ("import sys; import mgpu_dask.logreg.lbfgs.device, mgpu_dask.logreg.single_host, "
            "mgpu_dask.logreg.leader, mgpu_dask.logreg.solvers; "
            "print('scipy.linalg' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
    from mgpu_dask.logreg.lbfgs import loop

    g = np.array([1.0, -2.0])
    s, y = np.array([0.5, 0.0]), np.array([1.0, 0.0])
    np.testing.assert_allclose(loop._two_loop(g, [(s, y, 1.0 / float(s @ y))]), [0.5, -1.0])
