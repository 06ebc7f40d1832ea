"""Launch helpers for logistic regression: loss and gradient of one shard.

The dense products go to cuBLAS / BLAS; the intercept, softmax, cross-entropy
and residual are our fused kernel.  :class:`ShardObjective` keeps every buffer
of one shard allocated between evaluations and, on a GPU, queues the whole
evaluation on the shard's own stream, so one host thread can keep several
GPUs busy at once and wait only for the small results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._launch import array_module, on_gpu, thread_grid


def softmax_xent(logits: Any, labels: Any, bias: Any = None, *,
                 target: str | None = None) -> tuple[Any, Any]:
    """Residual ``softmax(logits + bias) - onehot(labels)`` and per-row cross-entropy."""
    xp = array_module(logits)
    bias = xp.zeros(logits.shape[1], dtype=logits.dtype) if bias is None else bias
    resid = xp.empty(logits.shape, dtype=logits.dtype)
    loss = xp.empty(logits.shape[0], dtype=np.float64)
    if target == "cuda" or (target is None and on_gpu(logits)):
        from . import logreg_cuda

        logreg_cuda.softmax_xent_rows[thread_grid(logits.shape[0])](logits, labels, bias, resid,
                                                                     loss)
    else:
        from . import logreg_cpu

        logreg_cpu.softmax_xent_rows(logits, labels, bias, resid, loss)
    return resid, loss


class ShardObjective:
    """Summed cross-entropy and gradient over one shard's rows, buffers kept between calls.

    ``launch(coef, intercept)`` starts an evaluation (on a GPU: queued on the
    shard's stream, the host returns at once); ``collect()`` waits for it and
    returns ``(loss, grad_coef, grad_intercept)`` as host float64 values.

    Parameters
    ----------
    X : array of shape (n, d), float32 (CuPy or NumPy)
    labels : array of shape (n,), int32 class indices
    n_classes : int
    """

    def __init__(self, X: Any, labels: Any, n_classes: int) -> None:
        self.X, self.labels, self.k = X, labels, int(n_classes)
        n, d = X.shape
        self.gpu = on_gpu(X)
        if self.gpu:
            self._init_gpu(n, d)
        else:
            self.W = np.empty((d, self.k), dtype=X.dtype)
            self.b = np.empty(self.k, dtype=X.dtype)
            self.logits = np.empty((n, self.k), dtype=X.dtype)
            self.resid = np.empty((n, self.k), dtype=X.dtype)
            self.loss = np.empty(n, dtype=np.float64)
            self._out: tuple | None = None

    def _init_gpu(self, n: int, d: int) -> None:
        import cupy
        import cupyx
        from numba import cuda

        from . import logreg_cuda

        self.device = cupy.cuda.Device(self.X.device.id)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            f32, k = self.X.dtype, self.k
            self.W = cupy.empty((d, k), dtype=f32)
            self.b = cupy.empty(k, dtype=f32)
            self.logits = cupy.empty((n, k), dtype=f32)
            self.resid = cupy.empty((n, k), dtype=f32)
            self.loss = cupy.empty((1, n), dtype=np.float64)
            # Row sums as products with ones: cuBLAS calls, no temporary memory.
            self.ones = cupy.ones((1, n), dtype=f32)
            self.ones64 = cupy.ones((n, 1), dtype=np.float64)
            self.G = cupy.empty((d + 1, k), dtype=f32)          # grad_coef; grad_intercept
            self.total = cupy.empty((1, 1), dtype=np.float64)   # summed loss
            self.W_h = cupyx.empty_pinned((d, k), dtype=f32)
            self.b_h = cupyx.empty_pinned(k, dtype=f32)
            self.G_h = cupyx.empty_pinned((d + 1, k), dtype=f32)
            self.total_h = cupyx.empty_pinned((1, 1), dtype=np.float64)
            views = [cuda.as_cuda_array(a, sync=False)
                     for a in (self.logits, self.labels, self.b, self.resid, self.loss.ravel())]
            grid, block = thread_grid(n)
            launcher = logreg_cuda.softmax_xent_rows[grid, block,
                                                     cuda.external_stream(self.stream.ptr)]
            self._kernel = lambda: launcher(*views)

    def _compute(self) -> None:
        """Queue the device work of one evaluation on the shard's stream (W, b on device)."""
        import cupy

        d = self.W.shape[0]
        with self.device, self.stream:
            cupy.matmul(self.X, self.W, out=self.logits)
            self._kernel()
            cupy.matmul(self.X.T, self.resid, out=self.G[:d])
            cupy.matmul(self.ones, self.resid, out=self.G[d:])
            cupy.matmul(self.loss, self.ones64, out=self.total)

    def launch(self, coef: np.ndarray, intercept: np.ndarray) -> None:
        """Start one evaluation at ``coef`` (d x n_classes) and ``intercept``."""
        if not self.gpu:
            self.W[...] = coef
            self.b[...] = intercept
            np.matmul(self.X, self.W, out=self.logits)
            resid, loss = self._cpu_xent()
            self._out = (float(loss.sum()), (self.X.T @ resid).astype(np.float64),
                         resid.sum(axis=0, dtype=np.float64))
            return
        self.W_h[...] = coef
        self.b_h[...] = intercept
        with self.device, self.stream:
            self.W.set(self.W_h, stream=self.stream)
            self.b.set(self.b_h, stream=self.stream)
            self._compute()
            self.G.get(stream=self.stream, out=self.G_h, blocking=False)
            self.total.get(stream=self.stream, out=self.total_h, blocking=False)

    def _cpu_xent(self) -> tuple[np.ndarray, np.ndarray]:
        from . import logreg_cpu

        logreg_cpu.softmax_xent_rows(self.logits, self.labels, self.b, self.resid, self.loss)
        return self.resid, self.loss

    def collect(self) -> tuple[float, np.ndarray, np.ndarray]:
        """Wait for the evaluation started by ``launch`` and return its host results."""
        if not self.gpu:
            out, self._out = self._out, None
            return out
        self.stream.synchronize()
        grads = self.G_h.astype(np.float64)
        return float(self.total_h[0, 0]), grads[:-1], grads[-1]

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple[float, np.ndarray,
                                                                         np.ndarray]:
        self.launch(coef, intercept)
        return self.collect()


def loss_grad(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray) -> tuple[
        float, np.ndarray, np.ndarray]:
    """Summed cross-entropy and its gradient over the rows of one shard.

    Parameters
    ----------
    X : array of shape (n, d), float32 (CuPy or NumPy)
    labels : array of shape (n,), int32 class indices
    coef : numpy.ndarray of shape (d, n_classes)
    intercept : numpy.ndarray of shape (n_classes,)

    Returns
    -------
    loss : float
        Sum of the rows' cross-entropies (no penalty, no averaging).
    grad_coef : numpy.ndarray of shape (d, n_classes), float64
    grad_intercept : numpy.ndarray of shape (n_classes,), float64
    """
    return ShardObjective(X, labels, len(intercept))(coef, intercept)


def decision(X: Any, coef: np.ndarray, intercept: np.ndarray) -> Any:
    """Logits ``X @ coef + intercept`` in the array module of ``X``."""
    xp = array_module(X)
    logits = X @ xp.asarray(coef, dtype=X.dtype)
    logits += xp.asarray(intercept, dtype=X.dtype)
    return logits
