"""Launch helpers for logistic regression: loss and gradient of one shard.

On a GPU one evaluation is a few operations queued on the shard's own
stream: upload the coefficients (or copy them from another GPU), then
``X @ W`` (cuBLAS), our softmax kernel and ``X^T @ residual`` (cuBLAS),
then one download of the gradient and the sums.  The strategies that
replace the float32 products have modules of their own: int8 tensor cores
(``logreg_int8``) and bf16 tensor cores (``logreg_bf16``) for rows of 8-bit
levels, our two passes over X (``logreg_fused``).
:class:`ShardObjective` keeps every buffer between evaluations and binds
those operations once, so a launch costs little host time and one host
thread keeps several GPUs busy at once.  On the CPU: BLAS products and a
Numba CPU kernel.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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


METHODS = ("auto", "int8", "bf16", "cublas", "fused", "int8-or-cublas", "bf16-or-cublas")


def level_step(X: Any) -> float:
    """The step of 8-bit levels the rows would be (``max|X| / 255``; 1 for all-zero rows);
    whether they are is ``logreg_cuda.to_levels``'s check."""
    xp = array_module(X)
    top = float(xp.maximum(xp.abs(X.max()), xp.abs(X.min())))
    return top / 255.0 if top > 0 else 1.0


def level_steps(X: Any, scale: float | None = None) -> tuple[float, float]:
    """``(to levels, of the rows)``: the step that turns ``X`` into integer levels, and the
    step of those levels in the rows ``X * scale`` that the objective sees.  uint8 rows are
    their own levels (no pass over them: 1 and ``scale``); others ``level_step``'s."""
    if X.dtype == np.uint8:
        return 1.0, float(scale or 1.0)
    step = level_step(X)
    return step, step * float(scale or 1.0)


def scaled_rows(X: Any, scale: float | None = None) -> Any:
    """The rows the objective sees, float32 in ``X``'s array module: ``X * scale`` (a new
    array), or ``X`` itself where it is float32 and unscaled."""
    xp = array_module(X)
    rows = xp.asarray(X, dtype=np.float32)
    if scale is not None:
        rows = rows * np.float32(scale)
    return rows


def converted_levels(device: Any, kernel: Any, x: Any, step: float, out: Any) -> bool:
    """Run a level conversion ``kernel(x, inv_step, out, bad)`` (``logreg_cuda.to_levels``,
    ``to_int8_levels``) over the CuPy rows ``x`` on ``device`` (current), on the current
    stream, grid-stride over at most 32 blocks of 256 threads per SM; whether every value
    was a level the kernel takes (one wait for its flag)."""
    import cupy

    bad = cupy.zeros(1, dtype=np.int32)
    sms = device.attributes["MultiProcessorCount"]
    bound_launch(kernel, [x, cupy.asarray([1.0 / step]), out, bad],
                 (min(-(-int(x.size) // 256), 32 * sms),), 256, cupy.cuda.get_current_stream())()
    return not int(bad.get()[0])


class Levels(NamedTuple):
    """Rows of 8-bit levels as the int8 products take them (``logreg_int8.levels``):
    ``X = step * (v + 128)`` for the first ``n`` rows and ``d`` columns of ``v`` (int8,
    padded with zeros), ``vt`` its transpose.  Made where the rows live (a peer worker
    exports these instead of X: half the bytes, and its GPU does the conversion)."""

    v: Any
    vt: Any
    step: float
    n: int
    d: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.d

    @property
    def device(self) -> Any:
        return self.v.device

    def rows(self) -> Any:
        """X again, float32 (exact: levels times the step), for paths that need X."""
        with self.v.device:
            return ((self.v[: self.n, : self.d].astype(np.float32) + 128)
                    * np.float32(self.step))


def rows_on_gpu(X: Any) -> bool:
    """Whether ``X`` (an array or :class:`Levels`) lives on a GPU."""
    return on_gpu(X.v if isinstance(X, Levels) else X)


class ShardObjective:
    """Summed cross-entropy and gradient over one shard's rows, buffers kept between calls.

    ``launch(coef, intercept)`` starts an evaluation (on a GPU: queued on the
    shard's stream, the host returns at once); ``collect()`` waits for it and
    returns ``(loss, grad_coef, grad_intercept)`` as host float64 values.

    Parameters
    ----------
    X : array of shape (n, d), float32 or uint8 (CuPy or NumPy), or :class:`Levels` on a
        GPU (rows already converted for the int8 products; other methods convert them
        back to float32)
    labels : array of shape (n,), int32 class indices
    n_classes : int
    method : {"cublas", "int8", "bf16", "auto", "fused", "int8-or-cublas", "bf16-or-cublas"}, \
default "cublas"
        On a GPU: ``"cublas"``, two float32 cuBLAS products around our softmax
        kernel; ``"int8"``, the products on int8 tensor cores for rows of 8-bit
        levels in [0, 255] times one step, such as pixels / 255 (``logreg_cuda``:
        the levels shifted to int8, coefficients and residuals in I8_TERMS int8
        terms, exact int32 sums combined in float64: X read at one byte per
        value, more exact than float32 products), a ValueError for other rows
        or a GPU of compute capability below 7.5; ``"bf16"``, the products on
        bf16 tensor cores for rows of 8-bit levels (levels exact, coefficients
        and residuals in TERMS bf16 terms, ``X^T R`` per block of
        ``logreg_bf16.GRADIENT_ROWS`` rows, the blocks added by an SGEMV), a ValueError for
        other rows or a GPU below 8.0; ``"A-or-cublas"``, A where it applies,
        else cublas (``method`` then says which); ``"auto"`` is
        ``"int8-or-cublas"``; ``"fused"``, our two passes over X, exact but not
        fast (0.58 ms per MNIST-sized evaluation on an H200 against cuBLAS's
        0.24 ms; ``benchmarks/NOTES-logreg.md``).  The CPU path is float32
        products whatever the method.
    scale : float or None, default None
        The objective's rows are ``X * scale``: uint8 rows (pixels) stay 8-bit, and
        the int8 and bf16 products take them as their own levels with this step
        (no float32 copy); the other methods multiply a float32 copy.
    """

    def __init__(self, X: Any, labels: Any, n_classes: int, method: str = "cublas",
                 scale: float | None = None) -> None:
        if method not in METHODS:
            raise ValueError(f"method={method!r} is not one of {', '.join(METHODS)}")
        self.X, self.labels, self.k, self.method = X, labels, int(n_classes), method
        self.scale = None if scale is None else float(scale)
        n, d = X.shape
        self.gpu = rows_on_gpu(X)
        if self.gpu:
            self._init_gpu(n, d)
        else:
            if self.scale is not None or X.dtype.kind != "f":
                self.X = X = scaled_rows(X, self.scale)
            self.W = np.empty((d, self.k), dtype=X.dtype)
            self.b = np.empty(self.k, dtype=X.dtype)
            self.logits = np.empty((n, self.k), dtype=X.dtype)
            self.resid = np.empty((n, self.k), dtype=X.dtype)
            self.loss = np.empty(n, dtype=np.float64)
            self._out: tuple | None = None

    def _init_gpu(self, n: int, d: int) -> None:
        import cupy

        k = self.k
        self.device = cupy.cuda.Device(self.X.device.id)  # an array's or the levels'
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # The rows may still be arriving on the caller's stream (a copy from the host
            # returns before its DMA ends): this stream starts after them, and every buffer
            # is made and zeroed on it, in order with the evaluations (a non-blocking
            # stream is not ordered with the legacy default stream).
            self.stream.wait_event(cupy.cuda.get_current_stream().record())
            with self.stream:
                self._init_buffers(n, d, k)

    def _init_buffers(self, n: int, d: int, k: int) -> None:
        import cupy
        import cupyx

        from . import logreg_bf16, logreg_cuda, logreg_fused, logreg_int8

        strategies = {"int8": logreg_int8, "bf16": logreg_bf16}
        wanted, _, fallback = ("int8-or-cublas" if self.method == "auto"
                               else self.method).partition("-or-")
        given = self.X if isinstance(self.X, Levels) else None
        if given is not None:
            self.scale = None  # the levels' step holds it
            if wanted != "int8":
                self.X, given = given.rows(), None
        if given is None and not (wanted in strategies and self.X.dtype == np.uint8):
            self.X = cupy.ascontiguousarray(scaled_rows(self.X, self.scale))
            self.scale = None  # applied
        # Labels may come from the host (a local fit of CuPy rows: NumPy codes).
        self.labels = cupy.ascontiguousarray(cupy.asarray(self.labels, dtype=np.int32))
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
        if wanted in strategies:
            found = (strategies[wanted].prepare(self, n, d) if given is None
                     else (given.v, given.vt, given.step))
            if found is None and not fallback:
                need = "in [0, 255] " if wanted == "int8" else ""
                cc = "7.5" if wanted == "int8" else "8.0"
                raise ValueError(f"method={wanted!r} needs rows of 8-bit levels {need}"
                                 "(integer multiples of max|X| / 255, such as pixels / "
                                 f"255) on a GPU of compute capability {cc} or newer; use "
                                 f"'{wanted}-or-cublas'")
            self.method = wanted if found is not None else fallback
            if found is None:  # uint8 rows kept for the levels: float32 after all
                self.X = cupy.ascontiguousarray(scaled_rows(self.X, self.scale))
        if self.method in strategies:
            self._ops = strategies[self.method].ops(self, n, d, *found)
        elif self.method == "fused":
            self.resid = cupy.empty((n, k), dtype=np.float32)
            self._ops = logreg_fused.ops(self, n, d)
        else:
            self.resid = cupy.empty((n, k), dtype=np.float32)
            self.logits = cupy.empty((n, k), dtype=np.float32)
            W = self.params[: d * k].reshape(d, k)
            blocks, threads = thread_grid(n, logreg_cuda.THREADS)
            self._ops = [
                bound_gemm(self.logits, self.X, W, self.stream),
                bound_launch(logreg_cuda.softmax_xent_rows,
                             [self.logits, self.labels, self.params[d * k:], self.resid,
                              self.sums], (blocks,), threads, self.stream),
                bound_gemm(self.grad, self.X, self.resid, self.stream, trans_a=True)]

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
            for op in self._ops:
                op()
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
            for op in self._ops:
                op()
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
    X : array of shape (n, d), float32 or uint8 (CuPy or NumPy)
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
    """Logits ``X @ coef + intercept`` in the array module of ``X`` (float32 for integer
    rows: uint8 pixels are converted block by block here, never kept as float32)."""
    xp = array_module(X)
    dtype = X.dtype if X.dtype.kind == "f" else np.dtype(np.float32)
    logits = X.astype(dtype, copy=False) @ xp.asarray(coef, dtype=dtype)
    logits += xp.asarray(intercept, dtype=dtype)
    return logits
