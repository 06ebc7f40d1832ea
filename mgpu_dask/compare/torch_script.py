"""PyTorch on one worker's GPU, no Dask in the loop: the seed study's PyTorch scripts,
timed where they run (backend ``torch-script``; ``torch`` runs on every worker's shards).

A single-GPU framework, as users run it: the host rows go to one worker once
(not timed, like the script loading its arrays), become tensors on that
worker's GPU (its CPU on CPU workers), and every repetition is timed inside
the worker with the device synchronised:

* KNN: per query tile one GEMM (``|t|^2 - 2 q.t``, fp32, no TF32),
  ``torch.topk``, then the distance-weighted (or uniform) vote by
  ``scatter_add`` -- the 20-line script (``torch_ops.knn_predict``);
* logistic regression: full-batch ``torch.optim.LBFGS`` on scikit-learn's
  objective, float32 (``torch_ops.lbfgs_fit``).

Its row is one GPU whatever the cluster size (``one_worker``); predictions
come to the host inside the timed predict.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .backend import BackendRun, converted_note
from .one_worker import repeat_here, rows_for, run_on_one_worker
from .torch_ops import knn_predict, lbfgs_fit, predict_block


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _on_worker(task: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray,
               options: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Runs on one worker: tensors there once, then one cold and ``repeats`` warm repetitions."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as every other row
    uploading = time.perf_counter()
    classes = np.unique(y)
    T = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float32), device=device)
    Q = torch.as_tensor(np.ascontiguousarray(Xt, dtype=np.float32), device=device)
    codes = torch.as_tensor(np.searchsorted(classes, y), dtype=torch.int64, device=device)
    _sync(torch, device)
    upload = time.perf_counter() - uploading

    def fit() -> tuple:
        if task == "knn":
            return T, (T * T).sum(dim=1)
        return lbfgs_fit([T], [codes], len(T), len(classes), options["C"],
                         options["max_iter"], options["tol"])

    def predict(model: tuple) -> np.ndarray:
        if task == "knn":
            pred = knn_predict(model[0], model[1], codes, Q, options["k"], options["weights"],
                               len(classes))
        else:
            pred = predict_block(Q, model[0], model[1])
        return pred.cpu().numpy()

    out = repeat_here(fit, predict, np.searchsorted(classes, yt), repeats,
                      lambda: _sync(torch, device))
    out["upload"] = upload
    out["where"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return out


def _run(task: str, run: BackendRun, X: np.ndarray, Xt: np.ndarray) -> dict[str, Any]:
    out = run_on_one_worker(run, _on_worker, task, X, Xt, "the PyTorch script")
    where = out.pop("where")
    note = (f"one GPU ({where}), timed inside the worker" if where != "CPU"
            else "the CPU of one worker, timed inside it")
    if task == "knn":
        note = "; ".join(n for n in (note, converted_note(run)) if n)
    return {**out, "note": note}


def knn(run: BackendRun) -> dict[str, Any]:
    return _run("knn", run, *rows_for("knn", run))


def logreg(run: BackendRun) -> dict[str, Any]:
    return _run("logreg", run, *rows_for("logreg", run))
