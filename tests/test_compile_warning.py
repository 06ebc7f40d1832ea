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
