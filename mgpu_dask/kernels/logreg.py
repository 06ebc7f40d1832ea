"""Launch helpers for logistic regression: loss and gradient of one shard.

On a GPU one evaluation is a few operations queued on the shard's own
stream: upload the coefficients (or copy them from another GPU), then
``X @ W`` (cuBLAS, float32 or bf16 tensor cores for 8-bit levels), our
softmax kernel and ``X^T @ residual`` (cuBLAS) -- or our own two passes
over X -- then one download of the gradient and the sums.
:class:`ShardObjective` keeps every buffer between evaluations and binds
those operations once, so a launch costs little host time and one host
thread keeps several GPUs busy at once.  On the CPU: BLAS products and a
Numba CPU kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._launch import (
    array_module,
    bound_gemm,
    bound_int8_gemm,
    bound_launch,
    bound_row_sum,
    launch,
    on_gpu,
    thread_grid,
)


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
GRADIENT_ROWS = 1024
"""bf16 method: ``levels^T R`` is one tensor-core product per block of this
many rows, and the blocks' products are added by an SGEMV.  Tensor cores
add in float32 without rounding to nearest: a sum along many rows drifts
(measured on an H200 against float64, largest entry: 2e-4 off for blocks of
65,536 rows and up to 5e-3 for one product over 4 million, where float32
cuBLAS is off by 3e-6).  Blocks of 1,024 rows were 6e-7 to 8e-7 off from
52,500 to 4 million rows (256: 8e-7 to 9e-7, 4,096: up to 3e-6; cuBLAS
4e-7 to 3e-6) and the fastest of the three (``benchmarks/results/
logreg-1xH200-bf16/call4``)."""


INT8_ROWS_OUT_FROM = 1 << 20
"""int8 method: shards of more rows than this take the forward product as (rows x
width) -- cuBLAS's int8 kernels for that shape read 4 million MNIST rows in
1.6 ms against 3.0 for (width x rows) on an H200, while below ~200,000 rows
(width x rows) is as fast or faster and lets the softmax kernel read it
coalesced (``benchmarks/results/round8-1xH200/call3``)."""
INT8_GRADIENT_ROWS = 16384
"""int8 method: ``v^T R`` is one int8 tensor-core product per block of this many
rows (int32 sums are exact up to ``logreg_cuda.I8_MAX_K`` rows; the blocks are
added in int64, so the block size is about speed only)."""


def fused_fits(d: int, k: int) -> bool:
    """Whether our two-pass kernels take this shape (else cuBLAS products and one kernel)."""
    from . import logreg_cuda as C

    return k <= C.MAX_K and d * k <= C.MAX_W and d <= C.MAX_D


def fused_loss_grad(X: Any, labels: Any, coef: Any, intercept: Any, *, row_blocks: int = 2,
                    col_blocks: int = 3) -> tuple[float, Any, Any]:
    """Our two-pass kernels once (the CUDA simulator runs them on NumPy arrays).

    Returns ``(loss, grad_coef (d x k, float32), grad_intercept (k,))``, unscaled sums.
    """
    from . import logreg_cuda as C

    xp = array_module(X)
    n, d = X.shape
    k = len(intercept)
    params = xp.concatenate([xp.asarray(coef, dtype=np.float32).ravel(),
                             xp.asarray(intercept, dtype=np.float32)])
    resid = xp.empty((n, k), dtype=np.float32)
    bpart = xp.empty((row_blocks, k + 1), dtype=np.float64)
    partial = xp.empty((col_blocks, d * k), dtype=np.float32)
    grad = xp.empty(d * k, dtype=np.float32)
    sums = xp.empty(k + 1, dtype=np.float64)
    launch(C.row_pass, row_blocks, C.ROW_WARPS * 32, X, labels, params, resid, bpart)
    launch(C.col_pass, col_blocks, -(-d // 32) * 32, X, resid, partial)
    launch(C.sum_blocks, -(-(d * k + k + 1) // C.SUM_LANES), 2 * C.SUM_LANES, partial, bpart,
           grad, sums)
    return float(sums[k]), grad.reshape(d, k), sums[:k]


def level_step(X: Any) -> float:
    """The step of 8-bit levels the rows would be (``max|X| / 255``; 1 for all-zero rows);
    whether they are is ``logreg_cuda.to_levels``'s check."""
    xp = array_module(X)
    top = float(xp.maximum(xp.abs(X.max()), xp.abs(X.min())))
    return top / 255.0 if top > 0 else 1.0


def bf16_loss_grad(X: np.ndarray, labels: np.ndarray, coef: np.ndarray,
                   intercept: np.ndarray) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The bf16 evaluation once, NumPy products standing in for cuBLAS's (exact products,
    float64 sums) and our kernels in the CUDA simulator: for tests of the kernels' logic.

    Returns ``(loss, grad_coef (d x k), grad_intercept (k,))`` as unscaled
    sums, or None where X is not 8-bit levels.
    """
    from . import logreg_cuda as C

    n, d = X.shape
    k = len(intercept)
    step = np.array([level_step(X)])
    levels = np.empty(n * d, dtype=np.uint16)
    bad = np.zeros(1, dtype=np.int32)
    launch(C.to_levels, 2, 32, np.ascontiguousarray(X, dtype=np.float32).reshape(-1),
           1.0 / step, levels, bad)
    if bad[0]:
        return None
    width = -(-C.TERMS * k // 8) * 8
    params = np.concatenate([np.asarray(coef, dtype=np.float32).ravel(),
                             np.asarray(intercept, dtype=np.float32)])
    w2 = np.zeros((d, width), dtype=np.uint16)
    launch(C.split_coef, -(-d * k // 32), 32, params, step, w2)

    def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (_bf16_values(a) @ _bf16_values(b)).astype(np.float32)

    levels = levels.reshape(n, d)
    logits2 = product(levels, w2)
    resid2 = np.zeros((n, width), dtype=np.uint16)
    sums = np.zeros(k + 1, dtype=np.float64)
    launch(C.softmax_xent_split, thread_grid(n, C.THREADS)[0], C.THREADS, logits2,
           np.asarray(labels, dtype=np.int32), params[d * k:], resid2, sums)
    grad = np.empty(d * k, dtype=np.float32)
    g2 = sum(product(levels[r:r + GRADIENT_ROWS].T, resid2[r:r + GRADIENT_ROWS]).astype(np.float64)
             for r in range(0, n, GRADIENT_ROWS)).astype(np.float32)
    launch(C.combine_split, -(-d * k // 32), 32, g2, step, grad)
    return float(sums[k]), grad.reshape(d, k), sums[:k]


def int8_loss_grad(X: np.ndarray, labels: np.ndarray, coef: np.ndarray,
                   intercept: np.ndarray) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The int8 evaluation once, NumPy int64 products standing in for cuBLAS's int8 ones
    (both exact) and our kernels in the CUDA simulator: for tests of the kernels' logic.

    Returns ``(loss, grad_coef (d x k), grad_intercept (k,))`` as unscaled
    sums, or None where X is not 8-bit levels in [0, 255] times one step.
    """
    from . import logreg_cuda as C

    n, d = X.shape
    k = len(intercept)
    step = np.array([level_step(X)])
    v = np.zeros((n, d), dtype=np.int8)
    bad = np.zeros(1, dtype=np.int32)
    launch(C.to_int8_levels, 2, 32, np.ascontiguousarray(X, dtype=np.float32), 1.0 / step, v,
           bad)
    if bad[0]:
        return None
    vt = np.zeros((d, n), dtype=np.int8)
    launch(C.transpose_i8, (-(-n // C.TILE), -(-d // C.TILE)), (C.TILE, C.TILE_ROWS), v, vt)
    width = _int8_width(k)
    params = np.concatenate([np.asarray(coef, dtype=np.float32).ravel(),
                             np.asarray(intercept, dtype=np.float32)])
    w8 = np.zeros((width, d), dtype=np.int8)
    colinfo = np.zeros(2 * k, dtype=np.float64)
    launch(C.split_coef_i8, k, C.THREADS, params, step, w8, colinfo)
    logits = (w8.astype(np.int64) @ v.T.astype(np.int64)).astype(np.int32)
    resid8 = np.zeros((width, n), dtype=np.int8)
    sums = np.zeros(k + 1, dtype=np.float64)
    blocks = thread_grid(n, C.THREADS)[0]
    bpart = np.zeros((blocks, k + 1), dtype=np.float64)
    launch(C.softmax_xent_i8, blocks, C.THREADS, logits, np.asarray(labels, dtype=np.int32),
           colinfo, resid8, bpart)
    launch(C.sum_block_parts, k + 1, C.THREADS, bpart, sums)
    rows = INT8_GRADIENT_ROWS
    g32 = np.stack([(vt[:, r:r + rows].astype(np.int64) @ resid8[:, r:r + rows].T.astype(np.int64))
                    .astype(np.int32) for r in range(0, n, rows)])
    grad = np.empty(d * k, dtype=np.float32)
    launch(C.combine_i8, -(-d * k // 32), 32, g32, step, sums, grad)
    return float(sums[k]), grad.reshape(d, k), sums[:k]


def _int8_width(k: int) -> int:
    """Columns of the int8 terms: I8_TERMS per class, padded to a multiple of 16."""
    from . import logreg_cuda as C

    return -(-C.I8_TERMS * k // 16) * 16


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


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
        GRADIENT_ROWS rows, the blocks added by an SGEMV), a ValueError for
        other rows or a GPU below 8.0; ``"A-or-cublas"``, A where it applies,
        else cublas (``method`` then says which); ``"auto"`` is
        ``"int8-or-cublas"``; ``"fused"``, our two passes over X, exact but not
        fast (0.58 ms per MNIST-sized evaluation on an H200 against cuBLAS's
        0.24 ms; ``benchmarks/NOTES-logreg.md``).  The CPU path is float32
        products whatever the method.
    """

    def __init__(self, X: Any, labels: Any, n_classes: int, method: str = "cublas") -> None:
        if method not in METHODS:
            raise ValueError(f"method={method!r} is not one of {', '.join(METHODS)}")
        self.X, self.labels, self.k, self.method = X, labels, int(n_classes), method
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

        k = self.k
        self.device = cupy.cuda.Device(self.X.device.id)
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

        from . import logreg_cuda

        self.X = cupy.ascontiguousarray(cupy.asarray(self.X, dtype=np.float32))
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
        wanted, _, fallback = ("int8-or-cublas" if self.method == "auto"
                               else self.method).partition("-or-")
        if wanted in ("int8", "bf16"):
            found = self._int8_levels(n, d) if wanted == "int8" else self._levels(n, d)
            if found is None and not fallback:
                need = "in [0, 255] " if wanted == "int8" else ""
                cc = "7.5" if wanted == "int8" else "8.0"
                raise ValueError(f"method={wanted!r} needs rows of 8-bit levels {need}"
                                 "(integer multiples of max|X| / 255, such as pixels / "
                                 f"255) on a GPU of compute capability {cc} or newer; use "
                                 f"'{wanted}-or-cublas'")
            self.method = wanted if found is not None else fallback
        if self.method == "int8":
            self._ops = self._int8_ops(n, d, *found)
        elif self.method == "bf16":
            self._ops = self._bf16_ops(n, d, *found)
        elif self.method == "fused":
            self.resid = cupy.empty((n, k), dtype=np.float32)
            self._ops = self._fused_ops(n, d)
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

    def _levels(self, n: int, d: int) -> tuple[Any, float] | None:
        """X as bf16 levels and their step (``X = step * levels``), or None where X is not
        8-bit levels or the GPU has no bf16 tensor cores (compute capability < 8.0).

        The levels get zero rows up to a whole number of GRADIENT_ROWS blocks.
        """
        import cupy

        from . import logreg_cuda as C

        if n == 0 or int(self.device.compute_capability) < 80:
            return None
        with self.stream:
            step = level_step(self.X)
            rows = -(-n // GRADIENT_ROWS) * GRADIENT_ROWS
            levels = cupy.zeros((rows, d), dtype=np.uint16)
            bad = cupy.zeros(1, dtype=np.int32)
            sms = self.device.attributes["MultiProcessorCount"]
            launch(C.to_levels, min(-(-n * d // 256), 32 * sms), 256, self.X.reshape(-1),
                   cupy.asarray([1.0 / step]), levels[:n].reshape(-1), bad)
            if int(bad.get()[0]):
                return None
        return levels, step

    def _int8_levels(self, n: int, d: int) -> tuple[Any, Any, float] | None:
        """X as int8 (``X = step * (v + 128)``) twice, ``v`` (n_pad x d_pad) and its
        transpose ``vt``, and the step; None where X is not 8-bit levels in [0, 255], d
        is too long for exact int32 sums, or the GPU has no int8 tensor cores (compute
        capability < 7.5).  Rows are padded with zeros to whole blocks of
        INT8_GRADIENT_ROWS (or of 16 when there is one block), features to 16."""
        import cupy

        from . import logreg_cuda as C

        if (n == 0 or d > C.I8_MAX_K or int(self.device.compute_capability) < 75
                or INT8_GRADIENT_ROWS > C.I8_MAX_K):
            return None
        with self.stream:
            step = level_step(self.X)
            block = INT8_GRADIENT_ROWS if n > INT8_GRADIENT_ROWS else -(-n // 16) * 16
            rows, cols = -(-n // block) * block, -(-d // 16) * 16
            v = cupy.zeros((rows, cols), dtype=np.int8)
            bad = cupy.zeros(1, dtype=np.int32)
            sms = self.device.attributes["MultiProcessorCount"]
            launch(C.to_int8_levels, min(-(-n * d // 256), 32 * sms), 256, self.X,
                   cupy.asarray([1.0 / step]), v[:n, :d], bad)
            if int(bad.get()[0]):
                return None
            vt = cupy.empty((cols, rows), dtype=np.int8)
            launch(C.transpose_i8, (-(-rows // C.TILE), -(-cols // C.TILE)),
                   (C.TILE, C.TILE_ROWS), v, vt)
        return v, vt, step

    def _int8_ops(self, n: int, d: int, v: Any, vt: Any, step: float) -> list:
        """Split coefficients, ``w8 @ v^T`` (int8 tensor cores), softmax with the residual
        split and per-block sums (added in a fixed order: the same bits every time),
        ``vt @ resid8^T`` per block of rows, the blocks and terms added (int64, float64) and
        scaled: see ``logreg_cuda``."""
        import cupy

        from . import logreg_cuda as C

        k = self.k
        rows, cols = v.shape
        width = _int8_width(k)
        block = min(rows, INT8_GRADIENT_ROWS)
        blocks = rows // block
        self.levels, self.levels_t, self.step = v, vt, float(step)
        self._step = cupy.asarray([step], dtype=np.float64)
        self.w8 = cupy.zeros((width, cols), dtype=np.int8)
        self.colinfo = cupy.zeros(2 * k, dtype=np.float64)
        if rows > INT8_ROWS_OUT_FROM:  # (rows x width), read through its transposed view
            out = cupy.empty((rows, width), dtype=np.int32)
            self.logits, forward = out.T, bound_int8_gemm(out, self.w8, v, cols, self.stream)
        else:
            self.logits = cupy.empty((width, rows), dtype=np.int32)
            forward = bound_int8_gemm(self.logits, v, self.w8, cols, self.stream)
        self.resid = cupy.zeros((width, rows), dtype=np.int8)
        self.grad32 = cupy.empty((blocks, cols, width), dtype=np.int32)
        row_blocks = thread_grid(n, C.THREADS)[0]
        self.bpart = cupy.empty((row_blocks, k + 1), dtype=np.float64)
        return [
            bound_launch(C.split_coef_i8, [self.params, self._step, self.w8, self.colinfo],
                         (k,), C.THREADS, self.stream),
            forward,
            bound_launch(C.softmax_xent_i8, [self.logits, self.labels, self.colinfo,
                                             self.resid, self.bpart],
                         (row_blocks,), C.THREADS, self.stream),
            bound_launch(C.sum_block_parts, [self.bpart, self.sums], (k + 1,), C.THREADS,
                         self.stream),
            bound_int8_gemm(self.grad32, self.resid, vt, block, self.stream, batches=blocks),
            bound_launch(C.combine_i8, [self.grad32[:, :d], self._step, self.sums,
                                        self.grad.reshape(-1)],
                         (-(-d * k // 256),), 256, self.stream)]

    def _bf16_ops(self, n: int, d: int, levels: Any, step: float) -> list:
        """Split coefficients, ``levels @ w2`` (bf16 tensor cores), softmax with the residual
        split, ``levels^T @ resid2`` per block of GRADIENT_ROWS rows, the blocks added
        (SGEMV), the terms added and scaled: see ``logreg_cuda``."""
        import cupy

        from . import logreg_cuda as C

        k = self.k
        width = -(-C.TERMS * k // 8) * 8  # terms, zeros: a multiple of 8 columns (tensor cores)
        blocks = levels.shape[0] // GRADIENT_ROWS
        self.levels, self.step = levels, float(step)
        self._step = cupy.asarray([step], dtype=np.float64)
        self.w2 = cupy.zeros((d, width), dtype=np.uint16)
        self.logits = cupy.empty((n, width), dtype=np.float32)
        self.resid = cupy.zeros((levels.shape[0], width), dtype=np.uint16)
        self.grad2 = cupy.empty((blocks, d * width), dtype=np.float32)
        self.grad2_sum = cupy.empty((d, width), dtype=np.float32)
        self._ones = cupy.ones(blocks, dtype=np.float32)
        coef_blocks = -(-d * k // 256)
        return [
            bound_launch(C.split_coef, [self.params, self._step, self.w2], (coef_blocks,), 256,
                         self.stream),
            bound_gemm(self.logits, levels[:n], self.w2, self.stream, operands="bf16"),
            bound_launch(C.softmax_xent_split, [self.logits, self.labels, self.params[d * k:],
                                                self.resid[:n], self.sums],
                         (thread_grid(n, C.THREADS)[0],), C.THREADS, self.stream),
            bound_gemm(self.grad2.reshape(blocks, d, width), levels, self.resid, self.stream,
                       trans_a=True, operands="bf16", batches=blocks),
            bound_row_sum(self.grad2_sum.reshape(-1), self.grad2, self._ones, self.stream),
            bound_launch(C.combine_split, [self.grad2_sum, self._step, self.grad.reshape(-1)],
                         (coef_blocks,), 256, self.stream)]

    def _fused_ops(self, n: int, d: int) -> list:
        """Row pass, column pass, block sums: X read twice at full width, no cuBLAS."""
        import cupy

        from . import logreg_cuda as C

        if not fused_fits(d, self.k):
            raise ValueError(f"method='fused' takes at most {C.MAX_K} classes, "
                             f"{C.MAX_W} coefficients and {C.MAX_D} features")
        k = self.k
        sms = self.device.attributes["MultiProcessorCount"]
        row_blocks = max(1, min(-(-n // C.ROW_WARPS), 5 * sms))  # 5 blocks of 45 KiB per SM
        col_blocks = max(1, min(-(-n // C.COL_CHUNK), 2 * sms))
        self.bpart = cupy.empty((row_blocks, k + 1), dtype=np.float64)
        self.partial = cupy.empty((col_blocks, d * k), dtype=np.float32)
        return [
            bound_launch(C.row_pass, [self.X, self.labels, self.params, self.resid, self.bpart],
                         (row_blocks,), C.ROW_WARPS * 32, self.stream),
            bound_launch(C.col_pass, [self.X, self.resid, self.partial], (col_blocks,),
                         -(-d // 32) * 32, self.stream),
            bound_launch(C.sum_blocks, [self.partial, self.bpart, self.grad.reshape(-1),
                                        self.sums], (-(-(d * k + k + 1) // C.SUM_LANES),),
                         C.SUM_LANES * C.SUM_LANES, self.stream)]

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
