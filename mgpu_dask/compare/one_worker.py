"""Single-GPU frameworks as users run them: host rows to one worker, timed inside it.

The PyTorch scripts and cuML's single-GPU estimators are not distributed:
their rows go to one worker once (not timed, like a script loading its
arrays), and each repetition is timed there with the device synchronised,
predictions brought to the host.  Their rows in the table are one GPU
whatever the cluster size.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..parallel.workers import scheduler_workers
from .backend import ONE_WORKER, BackendRun, BackendSkipped, pixel_scale


def cupy_rows_here(X: np.ndarray, y: np.ndarray, Xt: np.ndarray) -> tuple:
    """On the worker: ``(T, Q, codes, classes, seconds)``, the training and test rows as
    float32 CuPy arrays, the training labels' class indices (int32, on the GPU) among the
    sorted ``classes``, and the seconds the upload took (device synchronised)."""
    import cupy

    uploading = time.perf_counter()
    classes = np.unique(y)
    T = cupy.asarray(X, dtype=np.float32)
    Q = cupy.asarray(Xt, dtype=np.float32)
    codes = cupy.asarray(np.searchsorted(classes, y).astype(np.int32))
    cupy.cuda.get_current_stream().synchronize()
    return T, Q, codes, classes, time.perf_counter() - uploading


def repeat_here(fit: Callable[[], Any], predict: Callable[[Any], np.ndarray],
                truth: np.ndarray, repeats: int,
                sync: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """One cold and ``repeats`` warm (fit, predict) timings on this process's device.

    ``predict`` returns host predictions (so its time includes the copy home);
    ``sync`` waits for the device after the fit.  ``predictions`` holds the last
    repetition's, in the form ``predict`` returns them (class indices for the scripts).
    """
    rows = []
    for _ in range(1 + repeats):
        started = time.perf_counter()
        model = fit()
        sync()
        fitted = time.perf_counter()
        pred = np.asarray(predict(model))
        done = time.perf_counter()
        rows.append({"fit": fitted - started, "predict": done - fitted,
                     "accuracy": float((pred == truth).mean())})
    return {"cold": rows[0], "warm": rows[1:], "predictions": pred}


def run_on_one_worker(run: BackendRun, on_worker: Callable[..., dict[str, Any]], task: str,
                      X: np.ndarray, Xt: np.ndarray, framework: str) -> dict[str, Any]:
    """``on_worker(task, X, y, Xt, y_test, options, repeats)`` on the cluster's first worker
    (here without a cluster), the rows sent there first.  Its ``predictions``, class
    indices (the scripts' form), come back as labels."""
    p = run.parts
    if not isinstance(p.X_train, np.ndarray):
        raise BackendSkipped(f"{framework} takes host rows; rows generated on the workers "
                             "stay where they are")
    repeats = max(1, int(run.options.get("repeats", 1)))
    scattering = time.perf_counter()
    if run.client is None:
        out = on_worker(task, X, p.y_train, Xt, p.y_test, run.options, repeats)
        scattered = 0.0
    else:
        worker = sorted(scheduler_workers(run.client))[0]
        data = run.client.scatter([X, Xt], workers=[worker])
        scattered = time.perf_counter() - scattering
        future = run.client.submit(on_worker, task, data[0], p.y_train, data[1], p.y_test,
                                   run.options, repeats, workers=[worker], pure=False)
        out = future.result(timeout=run.timeout)
    if "predictions" in out:
        out["predictions"] = np.unique(p.y_train)[out["predictions"]]
    # The rows' placement: to the worker, then into its device memory (``upload``).
    return {**out, "placing": scattered + out.pop("upload", 0.0), "timed": ONE_WORKER}


def rows_for(task: str, run: BackendRun) -> tuple[Any, Any]:
    """Training and test rows as the single-GPU scripts take them: float32, pixels scaled
    to [0, 1] for logistic regression (rows generated on the workers: as they are, and
    :func:`run_on_one_worker` declines them)."""
    p = run.parts
    if not isinstance(p.X_train, np.ndarray):
        return p.X_train, p.X_test
    if task != "logreg":
        return p.X_train.astype(np.float32), p.X_test.astype(np.float32)
    scale = pixel_scale(p.X_train)
    return (p.X_train * scale).astype(np.float32), (p.X_test * scale).astype(np.float32)
