"""PyTorch code shared by the ``torch`` and ``torch-script`` backends.

Written as a PyTorch user writes it: KNN is a GEMM (fp32, no TF32),
``torch.topk`` and a ``scatter_add`` vote; logistic regression is
full-batch ``torch.optim.LBFGS`` (strong-Wolfe line search, 10 pairs) on
scikit-learn's objective, the mean cross-entropy plus ``||W||^2 / (2 C n)``
with the intercept unpenalised.  Arrays from CuPy or NumPy come in through
DLPack without a copy (:func:`tensor`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def tensor(block: Any) -> Any:
    """``block`` (CuPy or NumPy) as a torch tensor on its device, sharing its memory
    through DLPack; a copy for read-only NumPy blocks (PyTorch tensors are always
    writable, and some NumPy versions export read-only memory all the same) and for what
    DLPack cannot export."""
    import numpy as np
    import torch

    if isinstance(block, np.ndarray) and not block.flags.writeable:
        return torch.from_numpy(block.copy())
    try:
        return torch.from_dlpack(block)
    except (BufferError, TypeError, RuntimeError):
        return torch.as_tensor(np.array(block) if isinstance(block, np.ndarray) else block)


def knn_predict(T: Any, norms: Any, labels: Any, Q: Any, k: int, weights: str,
                n_classes: int, tile_bytes: int = 1 << 30) -> Any:
    """Class indices for the rows of ``Q`` (tensors on one device), query tiles under
    ``tile_bytes``; ``norms`` are ``|t|^2`` of ``T``'s rows, ``labels`` their class indices."""
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
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64, device=Q.device)


def lbfgs_fit(Xs: Sequence[Any], ys: Sequence[Any], n_total: int, n_classes: int, C: float,
              max_iter: int, tol: float,
              all_reduce: Callable[[Any], None] | None = None) -> tuple[Any, Any, int]:
    """``(coef (d x k), intercept, iterations)`` by full-batch ``torch.optim.LBFGS``.

    ``Xs``/``ys``: this process's row blocks and their class indices (int64);
    ``n_total`` rows in all.  With ``all_reduce`` (an in-place sum over every
    process, ``torch.distributed.all_reduce``) each evaluation adds the
    processes' data terms and gradients, so every process takes the same steps.
    """
    import torch

    X0 = Xs[0]
    W = torch.zeros((X0.shape[1], n_classes), dtype=X0.dtype, device=X0.device,
                    requires_grad=True)
    b = torch.zeros(n_classes, dtype=X0.dtype, device=X0.device, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=max_iter, tolerance_grad=tol,
                            tolerance_change=1e-12, history_size=10,
                            line_search_fn="strong_wolfe")
    penalty = 1.0 / (2.0 * C * n_total)
    cross_entropy = torch.nn.functional.cross_entropy

    def closure() -> Any:
        opt.zero_grad()
        data = sum(cross_entropy(X @ W + b, y, reduction="sum") for X, y in zip(Xs, ys)
                   if X.shape[0]) / n_total
        data.backward()
        data = data.detach()
        if all_reduce is not None:
            flat = torch.cat([W.grad.reshape(-1), b.grad, data.reshape(1)])
            all_reduce(flat)
            W.grad.copy_(flat[:W.numel()].view_as(W))
            b.grad.copy_(flat[W.numel():-1])
            data = flat[-1]
        with torch.no_grad():
            W.grad.add_(W, alpha=2.0 * penalty)
            return data + penalty * (W * W).sum()

    opt.step(closure)
    return W.detach(), b.detach(), int(opt.state[W].get("n_iter", 0))


def predict_block(X: Any, coef: Any, intercept: Any) -> Any:
    """Class indices ``argmax(X W + b)`` of one block (torch tensors on one device)."""
    return (X @ coef + intercept).argmax(dim=1)
