"""cuML's single-GPU estimators on one worker's GPU (the seed study's "cuML KNN library").

As users run them: the host rows become CuPy arrays on one worker's GPU once
(``one_worker``), then each repetition fits and predicts there, predictions
to the host, timed inside the worker.

* KNN: ``cuml.neighbors.KNeighborsClassifier`` for a uniform vote; for the
  distance-weighted vote (ours and scikit-learn's default here), which that
  classifier does not offer, ``cuml.neighbors.NearestNeighbors`` (brute
  force) gives the k neighbours and their distances and the vote is the
  same CuPy vote as the ``cupy`` backend's.
* Logistic regression: ``cuml.linear_model.LogisticRegression`` (L-BFGS,
  L2 penalty, ``C``, ``max_iter`` and ``tol`` as given), pixels scaled to
  [0, 1] like every other row.

Next to ``cuml`` (``cuml.dask``, every GPU of the cluster).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import BackendRun, converted_note, join_notes
from .cupy import vote
from .one_worker import cupy_rows_here, repeat_here, rows_for, run_on_one_worker


def _on_worker(task: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray,
               options: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Runs on one worker: CuPy arrays there once, then one cold and ``repeats`` warm ones."""
    import cupy

    T, Q, codes, classes, upload = cupy_rows_here(X, y, Xt)
    n_classes = len(classes)
    sync = cupy.cuda.get_current_stream().synchronize
    uniform = options.get("weights") == "uniform"

    def fit() -> Any:
        if task == "logreg":
            from cuml.linear_model import LogisticRegression

            return LogisticRegression(C=options["C"], max_iter=options["max_iter"],
                                      tol=options["tol"]).fit(T, codes)
        if uniform:
            from cuml.neighbors import KNeighborsClassifier

            return KNeighborsClassifier(n_neighbors=options["k"]).fit(T, codes)
        from cuml.neighbors import NearestNeighbors

        return NearestNeighbors(n_neighbors=options["k"], algorithm="brute").fit(T)

    def predict(model: Any) -> np.ndarray:
        if task == "logreg" or uniform:
            return cupy.asnumpy(cupy.asarray(model.predict(Q)))
        dist, nearest = model.kneighbors(Q)
        pred = vote(cupy.asarray(dist), codes[cupy.asarray(nearest)], "distance", n_classes)
        return cupy.asnumpy(pred)

    out = repeat_here(fit, predict, np.searchsorted(classes, yt), repeats, sync)
    out["upload"] = upload
    out["where"] = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    return out


def _run(task: str, run: BackendRun, X: np.ndarray, Xt: np.ndarray) -> dict[str, Any]:
    out = run_on_one_worker(run, _on_worker, task, X, Xt, "cuML's single-GPU estimator")
    note = f"one GPU ({out.pop('where')}), timed inside the worker"
    if task == "knn":
        vote_note = ("cuML's KNeighborsClassifier" if run.options.get("weights") == "uniform"
                     else "cuML's NearestNeighbors, distance-weighted vote in CuPy")
        note = join_notes(note, vote_note, converted_note(run))
    return {**out, "note": note}


def knn(run: BackendRun) -> dict[str, Any]:
    return _run("knn", run, *rows_for("knn", run))


def logreg(run: BackendRun) -> dict[str, Any]:
    return _run("logreg", run, *rows_for("logreg", run))
