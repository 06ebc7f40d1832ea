"""PyTorch on one worker's GPU: the seed study's PyTorch scripts, timed where they run.

A single-GPU framework, as users run it: the host rows go to one worker once
(not timed, like the script loading its arrays), become tensors on that
worker's GPU (its CPU on CPU workers), and every repetition is timed inside
the worker with the device synchronised:

* KNN: per query tile one GEMM (``|t|^2 - 2 q.t``, fp32, no TF32),
  ``torch.topk``, then the distance-weighted (or uniform) vote by
  ``scatter_add`` -- the 20-line script;
* logistic regression: full-batch ``torch.optim.LBFGS`` (strong-Wolfe line
  search, 10 pairs) on scikit-learn's objective, mean cross-entropy plus
  ``||W||^2 / (2 C n)`` with the intercept unpenalised, float32.

Its row is one GPU whatever the cluster size (``one_worker``); predictions
come to the host inside the timed predict.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import BackendRun, converted_note
from .one_worker import repeat_here, rows_for, run_on_one_worker


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def knn_predict(T: Any, norms: Any, labels: Any, Q: Any, k: int, weights: str,
                n_classes: int, tile_bytes: int = 1 << 30) -> Any:
    """Class indices for the rows of ``Q`` (tensors on one device), query tiles under ``tile_bytes``."""
    import torch

    step = max(1, tile_bytes // (4 * max(1, T.shape[0])))
    out = []
    for i in range(0, Q.shape[0], step):
        q = Q[i:i + step]
        score = norms[None, :] - 2.0 * (q @ T.T)
        top, nearest = torch.topk(score, k, dim=1, largest=False)
        dist = (top + (q * q).sum(dim=1, keepdim=True)).clamp_min(0.0).sqrt().double()
        if weights == "uniform":
            w = torch.ones_like(dist)
        else:
            exact = dist == 0
            w = torch.where(exact.any(dim=1, keepdim=True), exact.double(),
                            1.0 / torch.where(exact, torch.ones_like(dist), dist))
        votes = torch.zeros((q.shape[0], n_classes), dtype=torch.float64, device=q.device)
        votes.scatter_add_(1, labels[nearest], w)
        out.append(votes.argmax(dim=1))
    return torch.cat(out)


def lbfgs_fit(X: Any, y: Any, n_classes: int, C: float, max_iter: int, tol: float) -> tuple:
    """``(coef (d x k), intercept, iterations)`` by full-batch ``torch.optim.LBFGS``."""
    import torch

    n, d = X.shape
    W = torch.zeros((d, n_classes), dtype=X.dtype, device=X.device, requires_grad=True)
    b = torch.zeros(n_classes, dtype=X.dtype, device=X.device, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=max_iter, tolerance_grad=tol,
                            tolerance_change=1e-12, history_size=10,
                            line_search_fn="strong_wolfe")
    penalty = 1.0 / (2.0 * C * n)

    def closure() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(X @ W + b, y) + penalty * (W * W).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return W.detach(), b.detach(), int(opt.state[W].get("n_iter", 0))


def _on_worker(task: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray,
               options: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Runs on one worker: tensors there once, then one cold and ``repeats`` warm repetitions."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as every other row
    classes = np.unique(y)
    T = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float32), device=device)
    Q = torch.as_tensor(np.ascontiguousarray(Xt, dtype=np.float32), device=device)
    codes = torch.as_tensor(np.searchsorted(classes, y), dtype=torch.int64, device=device)
    _sync(torch, device)

    def fit() -> tuple:
        if task == "knn":
            return T, (T * T).sum(dim=1)
        return lbfgs_fit(T, codes, len(classes), options["C"], options["max_iter"],
                         options["tol"])

    def predict(model: tuple) -> np.ndarray:
        if task == "knn":
            pred = knn_predict(model[0], model[1], codes, Q, options["k"], options["weights"],
                               len(classes))
        else:
            pred = (Q @ model[0] + model[1]).argmax(dim=1)
        return pred.cpu().numpy()

    out = repeat_here(fit, predict, np.searchsorted(classes, yt), repeats,
                      lambda: _sync(torch, device))
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
