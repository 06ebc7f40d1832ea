"""A device fit whose loop kernels are still compiling (a machine's first) runs the host's
L-BFGS on its own evaluations instead of waiting (``mgpu_dask.logreg.lbfgs.meanwhile``);
the next fit of the same rows binds the loop and runs it on the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import config

from test_logreg import _host_objective, _two_shard_problem

ROOT = Path(__file__).resolve().parents[1]
simulated = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                               reason="CUDA kernels run here only under the simulator")


def _problem(n, d, k, optimizer, l1=0.0, max_iter=30):
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg.problem import Problem

    return Problem(n, d, k, 1.0 / n, max_iter, 1e-8, optimizer, Precision.FP32, None, l1=l1)


@simulated
@pytest.mark.parametrize("l1", [0.0, 0.02])
def test_a_fit_whose_loop_is_compiling_runs_the_host_loop_then_the_device_loop(monkeypatch,
                                                                               l1):
    from mgpu_dask.logreg import solvers
    from mgpu_dask.logreg.lbfgs import launches, loop, meanwhile
    from mgpu_dask.parallel import kept_with_blocks

    shards, n, d, k = _two_shard_problem(scale=0.5)
    problem = _problem(n, d, k, "auto", l1, max_iter=12 if l1 else 30)
    kept = ([X for X, _ in shards], (("m0", "m1"), "device fit", False, None))
    bound = []
    real = launches.launches
    monkeypatch.setattr(launches, "launches", lambda b, *a: bound.append(b) or real(b, *a))
    monkeypatch.setattr(launches, "compiling", lambda: True)
    monkeypatch.setattr(launches, "_MEANWHILE", [])  # this process's first fit
    try:
        first = solvers.fit_on_device(shards, problem, kept)
        assert not bound  # nothing of the loop bound while it compiles
        # the next fit waits for the kernels (still compiling here: launches waits)
        again = solvers.fit_on_device(shards, problem, kept)
    finally:
        kept_with_blocks.forget("m0")
    assert (first["optimizer"], first["graph"], first["optimizer_note"]) == (
        "host", None, meanwhile.NOTE)
    assert first["profile"]["loop kernels compiling"]
    # The host loop on the backend's evaluations: the steps of the host loop on the rows
    penalty = problem.penalty
    want = loop.minimize_lbfgs(_host_objective(shards, n, d, k, penalty), np.zeros(d * k + k),
                               maxiter=problem.max_iter, gtol=1e-8,
                               l1=np.r_[np.full(d * k, l1), np.zeros(k)] if l1 else None)
    if not l1:
        assert (first["nit"], first["nfev"]) == (want["nit"], want["nfev"])
        np.testing.assert_allclose(first["x"], want["x"], rtol=1e-9, atol=1e-11)
    # The next fit takes the kept backend up, binds its loop and runs it on the device:
    # the same solution
    assert again["optimizer"] == "device" and "optimizer_note" not in again
    assert again["profile"]["state kept"] and len(bound) == 1
    np.testing.assert_allclose(again["x"], first["x"], rtol=1e-6, atol=1e-8)
    assert abs(again["fun"] - first["fun"]) <= 1e-9 * abs(first["fun"])


@simulated
def test_optimizer_device_waits_for_the_loop_kernels(monkeypatch):
    from mgpu_dask.logreg import solvers
    from mgpu_dask.logreg.lbfgs import launches

    shards, n, d, k = _two_shard_problem(scale=0.5)
    monkeypatch.setattr(launches, "compiling", lambda: True)
    monkeypatch.setattr(launches, "_MEANWHILE", [])
    got = solvers.fit_on_device(shards, _problem(n, d, k, "device", max_iter=2))
    assert got["optimizer"] == "device" and "optimizer_note" not in got


def test_the_meanwhile_note_reaches_the_models_notes():
    from mgpu_dask import LogisticRegression
    from mgpu_dask.logreg import fitted
    from mgpu_dask.logreg.lbfgs import meanwhile

    model = LogisticRegression()
    model.classes_ = np.array([0, 1])
    result = {"x": np.zeros(6), "nit": 3, "nfev": 4, "round_trips": 0, "comm": "graph",
              "optimizer": "host", "graph": None, "optimizer_note": meanwhile.NOTE,
              "fun": 0.5, "success": True}
    fitted.keep(model, result, 2)
    assert model.optimizer_ == "host" and model.notes_ == [meanwhile.NOTE]


FIRST_FITS = """
import json, time
import cupy, numpy as np
from mgpu_dask import LogisticRegression
rng = np.random.default_rng(0)
X = rng.standard_normal((100_000, 32)).astype(np.float32)
y = np.argmax(X @ rng.standard_normal((32, 10)) + rng.gumbel(size=(100_000, 10)), axis=1)
X = cupy.asarray(X)
out = []
for _ in range(3):
    began = time.perf_counter()
    m = LogisticRegression(max_iter=200, tol=1e-7).fit(X, y)
    out.append({"seconds": time.perf_counter() - began, "optimizer": m.optimizer_,
                "graph": m.graph_, "notes": m.notes_, "coef": m.coef_.tolist(),
                "loss": m.loss_})
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_a_first_fit_on_a_new_machine_runs_the_host_loop_and_later_fits_the_device_loop(
        tmp_path):
    """A new process with an empty Numba cache: its first fit does not wait for the loop's
    kernels (the host loop on the GPU evaluations, said in ``notes_``); the next fits wait
    for what is left of the compile and run the loop on the device as one CUDA graph an
    iteration, to the same solution."""
    from mgpu_dask.logreg.lbfgs import meanwhile

    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=path)
    ran = subprocess.run([sys.executable, "-c", FIRST_FITS], env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    first, second, third = json.loads(ran.stdout.strip().splitlines()[-1])
    assert first["optimizer"] == "host" and meanwhile.NOTE in first["notes"], first["notes"]
    for later in (second, third):
        assert (later["optimizer"], later["graph"], later["notes"]) == ("device", True, [])
        np.testing.assert_allclose(later["coef"], first["coef"], rtol=1e-3, atol=1e-4)
        assert abs(later["loss"] - first["loss"]) <= 1e-6 * abs(first["loss"])
