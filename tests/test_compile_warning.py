"""A first fit on a kind of data says, before the wait, that our kernels compile; once
they are in the kernel cache, later processes say nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys, warnings
import numpy as np
from sklearn.datasets import load_digits
from mgpu_dask import CompileWarning, KNeighborsClassifier, LogisticRegression

X, y = load_digits(return_X_y=True)
X = (X / 7).astype(np.float32)  # float rows, not 8-bit values
said = {}
for name, model in (("knn", KNeighborsClassifier(3)), ("logreg", LogisticRegression())):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y).predict(X[:10])
        model.fit(X, y)  # the same kind of data again: asked once
    said[name] = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
print(json.dumps(said))
"""


def _run(cache: Path) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_first_fit_announces_the_compile_and_a_cached_one_does_not(tmp_path):
    first = _run(tmp_path)
    for task in ("knn", "logreg"):
        assert len(first[task]) == 1, first  # once per kind of run, before the compile
        assert f"compiling mgpu_dask's {task} kernels for float32 rows of 64 features" \
            in first[task][0]
        assert str(tmp_path) in first[task][0]  # where they will be kept
    assert _run(tmp_path) == {"knn": [], "logreg": []}  # loaded from the cache


def test_with_a_client_a_worker_is_asked_and_names_its_own_cache(client, monkeypatch):
    """With a client the question goes to a worker (its cache is the one that compiles),
    once per kind of run; a worker's answer of "not seen" warns with its cache folder."""
    import warnings

    import numpy as np
    from sklearn.datasets import load_digits

    from mgpu_dask import CompileWarning, KNeighborsClassifier
    from mgpu_dask.kernels import compiled
    from mgpu_dask.knn import warmup
    from mgpu_dask.parallel import first_use

    asked = []
    monkeypatch.setattr(first_use, "_ASKED", set())
    monkeypatch.setattr(warmup, "seen", lambda **fields: asked.append(fields) or False)
    monkeypatch.setattr(compiled, "cache_dir", lambda: "/the/worker/cache")
    X, y = load_digits(return_X_y=True)
    X = (X / 7).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        KNeighborsClassifier(3).fit(X, y)
        KNeighborsClassifier(3).fit(X, y)  # the same kind: not asked again
    said = [str(w.message) for w in caught if issubclass(w.category, CompileWarning)]
    assert len(asked) == 1 and asked[0]["n_features"] == 64 and asked[0]["dtype"] == "float32"
    assert len(said) == 1 and "/the/worker/cache" in said[0]


CPU_SEARCH = {"gpu": False, "n_features": 8, "dtype": "float32", "precision": "auto",
              "method": "gemm", "k": 3, "margin": None, "weights": "uniform", "merge": False}


def test_a_warm_up_runs_once_per_kind_and_a_search_waits_for_it(client, monkeypatch):
    """warm_up_workers has the workers run ``warmup.warm_up`` in a thread, once per kind of
    run and process (these workers share this one); a search started meanwhile waits for
    it (``settled``) instead of compiling the same kernels beside it."""
    import threading

    from mgpu_dask.knn import warmup
    from mgpu_dask.parallel import first_use

    release, started = threading.Event(), []

    def slow(**fields):
        started.append(fields)
        release.wait(30)

    monkeypatch.setattr(first_use, "_WARMING", {})
    monkeypatch.setattr(warmup, "warm_up", slow)
    first_use.warm_up_workers("knn", CPU_SEARCH, client)
    first_use.warm_up_workers("knn", CPU_SEARCH, client)  # the same kind: not again
    assert len(client.nthreads()) > 1 and started == [CPU_SEARCH]
    waiting = threading.Thread(target=first_use.settled, args=(30,))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # held while the kernels compile
    release.set()
    waiting.join(10)
    assert not waiting.is_alive()


def test_a_real_warm_up_in_a_thread_ends_and_a_search_goes_through_settled(monkeypatch):
    """The CPU warm-up run by warm_up_here finishes without an error; a KNN search asks
    ``settled`` first."""
    import numpy as np

    from mgpu_dask import KNeighborsClassifier
    from mgpu_dask.parallel import first_use

    monkeypatch.setattr(first_use, "_WARMING", {})
    monkeypatch.setattr(first_use, "FAILED", {})
    assert first_use.warm_up_here("knn", **CPU_SEARCH)
    assert not first_use.warm_up_here("knn", **CPU_SEARCH)
    first_use.settled(120)
    assert not any(t.is_alive() for t in first_use._WARMING.values())
    assert first_use.FAILED == {}
    asked = []
    real = first_use.settled
    monkeypatch.setattr(first_use, "settled", lambda *a: asked.append(a) or real(*a))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 8)).astype(np.float32)
    KNeighborsClassifier(3).fit(X, np.arange(40) % 3).predict(X[:5])
    assert asked


def test_only_gpu_fits_that_announce_a_compile_start_warm_ups(monkeypatch):
    """The KNN fit starts the workers' warm-up where it announced a compile, on GPUs (a CPU
    search compiles in well under a second)."""
    import numpy as np

    from mgpu_dask.knn import choices

    class Model:
        method, n_neighbors, margin, weights = "gemm", 5, None, "distance"

    choice = choices.Choice("replicate", choices.Precision.FP16, None,
                            choices.precisions.EightBit(False, 0), None)
    X = np.zeros((10, 12), np.float32)
    for device, announced, started in (("gpu", True, 1), ("gpu", False, 0), ("cpu", True, 0)):
        calls = []
        monkeypatch.setattr(choices, "announce_compiles", lambda *a, **k: announced)
        monkeypatch.setattr(choices, "warm_up_workers", lambda *a: calls.append(a))
        choices.announce(X, choice, device, Model(), None)
        assert len(calls) == started
        if started:
            task, fields, client = calls[0]
            assert (task, client) == ("knn", None)
            assert fields["gpu"] and fields["n_features"] == 12 and fields["k"] == 5
