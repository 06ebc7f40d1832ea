"""Launch helpers for logistic regression: loss and gradient of one shard.

On a GPU one evaluation is six operations queued on the shard's own stream:
upload the coefficients, clear the accumulators, ``X @ W`` (cuBLAS), our
kernel (intercept, softmax residual, cross-entropy; block sums of the
intercept gradient and the loss), ``X^T @ residual`` (cuBLAS), and one
download of the gradient and the sums.  :class:`ShardObjective` keeps every
buffer between evaluations and binds those operations once, so a launch costs
little host time and one host thread keeps several GPUs busy at once.  On the
CPU: BLAS products and a Numba CPU kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._launch import array_module, bound_gemm, bound_launch, launch, on_gpu, thread_grid


def softmax_xent(logits: np.ndarray, labels: np.ndarray,
                 bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Residual ``softmax(logits + bias) - onehot(labels)`` and per-row cross-entropy (CPU)."""
    from . import logreg_cpu

    bias = np.zeros(logits.shape[1], dtype=logits.dtype) if bias is None else bias
    resid = np.empty(logits.shape, dtype=logits.dtype)
    loss = np.empty(logits.shape[0], dtype=np.float64)
    logreg_cpu.softmax_xent_rows(logits, labels, bias, resid, loss)
    return resid, loss


def softmax_xent_sums(logits: Any, labels: Any, bias: Any) -> tuple[Any, np.ndarray, float]:
    """Our CUDA kernel once: residual, intercept gradient and summed loss.

    CuPy arrays on a GPU; NumPy arrays run in the CUDA simulator.  Returns
    ``(resid (n, k) on the device, grad_intercept (k,) host float64, loss)``.
    """
    from . import logreg_cuda

    xp = array_module(logits)
    n, k = logits.shape
    resid = xp.empty((n, k), dtype=logits.dtype)
    acc = xp.zeros(k + 1, dtype=np.float64)
    launch(logreg_cuda.softmax_xent_rows, *thread_grid(n, logreg_cuda.THREADS), logits, labels,
            bias, resid, acc)
    acc = acc.get() if xp is not np else acc
    return resid, acc[:k], float(acc[k])


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

        from . import logreg_cuda

        k = self.k
        self.device = cupy.cuda.Device(self.X.device.id)
        with self.device:
            self.X = cupy.ascontiguousarray(cupy.asarray(self.X, dtype=np.float32))
            # Labels may come from the host (a local fit of CuPy rows: NumPy codes).
            self.labels = cupy.ascontiguousarray(cupy.asarray(self.labels, dtype=np.int32))
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # Upload: W (d x k, row-major) then b.  Download, one copy: the
            # coefficient gradient (float32, from cuBLAS), then the float64
            # sums [grad_intercept, loss] at an 8-byte aligned offset.
            self.params = cupy.empty(d * k + k, dtype=np.float32)
            self.params_h = cupyx.empty_pinned(d * k + k, dtype=np.float32)
            self._sums_at = -(-4 * d * k // 8) * 8
            out = cupy.empty(self._sums_at + 8 * (k + 1), dtype=np.uint8)
            self.out_h = cupyx.empty_pinned(out.size, dtype=np.uint8)
            self.out = out
            self.grad = out[: 4 * d * k].view(np.float32).reshape(d, k)
            self.sums = out[self._sums_at:].view(np.float64)
            self.logits = cupy.empty((n, k), dtype=np.float32)
            self.resid = cupy.empty((n, k), dtype=np.float32)
            W = self.params[: d * k].reshape(d, k)
            self._logits = bound_gemm(self.logits, self.X, W, self.stream)
            self._gradient = bound_gemm(self.grad, self.X, self.resid, self.stream, trans_a=True)
            blocks, threads = thread_grid(n, logreg_cuda.THREADS)
            self._kernel = bound_launch(
                logreg_cuda.softmax_xent_rows,
                [self.logits, self.labels, self.params[d * k:], self.resid, self.sums],
                (blocks,), threads, self.stream)

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
        from cupy.cuda import runtime

        dk = coef.size
        self.params_h[:dk] = coef.ravel()
        self.params_h[dk:] = intercept
        stream = self.stream.ptr
        with self.device:
            runtime.memcpyAsync(self.params.data.ptr, self.params_h.ctypes.data,
                                self.params.nbytes, runtime.memcpyHostToDevice, stream)
            runtime.memsetAsync(self.sums.data.ptr, 0, self.sums.nbytes, stream)
            self._logits()
            self._kernel()
            self._gradient()
            runtime.memcpyAsync(self.out_h.ctypes.data, self.out.data.ptr, self.out.nbytes,
                                runtime.memcpyDeviceToHost, stream)

    def queue_from(self, params: Any, after: Any, grad_to: Any, sums_to: Any, done: Any) -> None:
        """Queue an evaluation at parameters already on a GPU (GPU shards only).

        On the shard's stream, once event ``after`` has fired: copy ``params``
        (float32 ``[coef (d x k, row-major), intercept]``, on any GPU) in,
        evaluate, copy the coefficient gradient (float32, unscaled) to
        ``grad_to`` and the sums ``[grad_intercept, loss]`` (float64) to
        ``sums_to`` (arrays on any GPU), then record event ``done``.  Nothing
        goes through the host.
        """
        from cupy.cuda import runtime

        stream = self.stream.ptr
        default = runtime.memcpyDefault  # peer copies where the arrays are on other GPUs
        with self.device:
            self.stream.wait_event(after)
            runtime.memcpyAsync(self.params.data.ptr, params.data.ptr, self.params.nbytes,
                                default, stream)
            runtime.memsetAsync(self.sums.data.ptr, 0, self.sums.nbytes, stream)
            self._logits()
            self._kernel()
            self._gradient()
            runtime.memcpyAsync(grad_to.data.ptr, self.grad.data.ptr, self.grad.nbytes, default,
                                stream)
            runtime.memcpyAsync(sums_to.data.ptr, self.sums.data.ptr, self.sums.nbytes, default,
                                stream)
            done.record(self.stream)

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
        grad = self.out_h[: self.grad.nbytes].view(np.float32).astype(np.float64)
        sums = self.out_h[self._sums_at:].view(np.float64).copy()
        return float(sums[-1]), grad.reshape(-1, self.k), sums[:-1]

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
