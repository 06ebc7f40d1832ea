"""cuVS's brute-force KNN on one worker's GPU: RAPIDS's vector-search library, the one
under cuML's ``NearestNeighbors(algorithm="brute")``, called directly.

As users run it: the host rows become float32 CuPy arrays on one worker's GPU
once (``one_worker``), then each repetition builds the index
(``cuvs.neighbors.brute_force.build``, squared euclidean) and searches the k
nearest for every test row, the vote (uniform, or distance-weighted as
scikit-learn's, on the square roots of cuVS's squared distances) is the CuPy
vote the ``cupy`` and ``cuml-single`` backends share, predictions to the
host, timed inside the worker.  cuVS has no logistic regression: that row
says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import BackendRun, BackendSkipped, converted_note, join_notes
from .cupy import vote
from .one_worker import cupy_rows_here, repeat_here, rows_for, run_on_one_worker


def _on_worker(task: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray,
               options: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Runs on one worker: CuPy arrays there once, then one cold and ``repeats`` warm runs."""
    import cupy
    from cuvs.neighbors import brute_force

    T, Q, codes, classes, upload = cupy_rows_here(X, y, Xt)
    sync = cupy.cuda.get_current_stream().synchronize

    def predict(index: Any) -> np.ndarray:
        squared, nearest = brute_force.search(index, Q, int(options["k"]))
        dist = cupy.sqrt(cupy.maximum(cupy.asarray(squared), 0))
        labels = codes[cupy.asarray(nearest).astype(np.int64)]
        return cupy.asnumpy(vote(dist, labels, options.get("weights", "distance"),
                                 len(classes)))

    out = repeat_here(lambda: brute_force.build(T, metric="sqeuclidean"), predict,
                      np.searchsorted(classes, yt), repeats, sync)
    out["upload"] = upload
    out["where"] = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    return out


def knn(run: BackendRun) -> dict[str, Any]:
    out = run_on_one_worker(run, _on_worker, "knn", *rows_for("knn", run), "cuVS")
    note = join_notes(f"one GPU ({out.pop('where')}), timed inside the worker; brute force, "
                      "float32", converted_note(run))
    return {**out, "note": note}


def logreg(run: BackendRun) -> dict[str, Any]:
    raise BackendSkipped("cuVS is vector search only (no logistic regression)")
