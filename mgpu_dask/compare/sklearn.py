"""scikit-learn on the client's CPU cores: the single-machine reference.

Its seconds dwarf their spread, so it runs one cold and ``cpu_repeats`` (1)
warm repetitions, and not at all above ``cpu_max_train`` training rows where
that option is set (``bench --cpu-max-train``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .backend import HOST, BackendRun, BackendSkipped, converted_note, pixel_scale


def _timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _host_only(run: BackendRun) -> None:
    if not isinstance(run.parts.X_train, np.ndarray):
        raise BackendSkipped("the training rows were generated on the workers; the CPU "
                             "reference takes host data")


def _run(make: Any, run: BackendRun, X_train: np.ndarray, X_test: np.ndarray) -> dict[str, Any]:
    p = run.parts
    limit = run.options.get("cpu_max_train")
    if limit is not None and len(p.y_train) > limit:
        raise BackendSkipped(f"{len(p.y_train)} training rows > --cpu-max-train {limit}")
    repeats = max(1, int(run.options.get("cpu_repeats", 1)))
    rows = []
    for _ in range(1 + repeats):
        model, fit_s = _timed(lambda: make().fit(X_train, p.y_train))
        pred, predict_s = _timed(lambda: model.predict(X_test))
        rows.append({"fit": fit_s, "predict": predict_s,
                     "accuracy": float((pred == p.y_test).mean())})
    return {"cold": rows[0], "warm": rows[1:], "predictions": np.asarray(pred),
            "note": converted_note(run), "placing": 0.0, "timed": HOST}


def knn(run: BackendRun) -> dict[str, Any]:
    from sklearn.neighbors import KNeighborsClassifier

    _host_only(run)
    o = run.options
    return _run(lambda: KNeighborsClassifier(o["k"], weights=o["weights"], algorithm="brute",
                                             n_jobs=-1),
                run, run.parts.X_train.astype(np.float32), run.parts.X_test.astype(np.float32))


def logreg(run: BackendRun) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    _host_only(run)
    o = run.options
    scale = pixel_scale(run.parts.X_train)
    return _run(lambda: LogisticRegression(C=o["C"], max_iter=o["max_iter"], tol=o["tol"]),
                run, run.parts.X_train * scale, run.parts.X_test * scale)
