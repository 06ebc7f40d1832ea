"""Loss and gradient of one shard of a multinomial logistic regression.

On a GPU one evaluation is a few operations queued on the shard's own
stream: the coefficients uploaded (or copied from another GPU), the
products, our softmax kernel, the gradient product, one download.  The
products run in a :class:`~mgpu_dask.kernels.precision.Precision`: float32
cuBLAS (:mod:`.cuda`), or tensor cores for rows of 8-bit levels (:mod:`.int8`,
:mod:`.bf16`).  :class:`ShardObjective` keeps every buffer between
evaluations and binds those operations once, so a launch costs little host
time and one host thread keeps several GPUs busy at once.  On the CPU: BLAS
products and a Numba CPU kernel (:mod:`.cpu`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cublas import bound_gemm
from ..launch import array_module, bound_launch
from ..precision import Precision
from .levels import Levels, rows_on_gpu, scaled_rows

PRECISIONS = (Precision.INT8, Precision.BF16, Precision.FP32)
"""The products an evaluation can run in (``AUTO`` is ``INT8`` where it applies)."""


class ShardObjective:
    """Summed cross-entropy and gradient over one shard's rows, buffers kept between calls.

    ``launch(coef, intercept)`` starts an evaluation (on a GPU: queued on the
    shard's stream, the host returns at once); ``collect()`` waits for it and
    returns ``(loss, grad_coef, grad_intercept)`` as host float64 values.

    Parameters
    ----------
    X : array of shape (n, d), float32 or uint8 (CuPy or NumPy), or :class:`Levels` on a
        GPU (rows already converted for the int8 products; other precisions convert
        them back to float32)
    labels : array of shape (n,), int32 class indices
    n_classes : int
    precision : Precision or str, default "fp32"
        The products on a GPU.  ``FP32``: two float32 cuBLAS products around
        our softmax kernel.  ``INT8``: int8 tensor cores for rows of 8-bit
        levels in [0, 255] times one step, such as pixels / 255 (the levels
        shifted to int8, coefficients and residuals in four int8 terms, exact
        int32 sums combined in float64: X read at one byte per value, more
        exact than float32 products; compute capability 7.5 or newer).
        ``BF16``: bf16 tensor cores for such rows (levels exact, coefficients
        and residuals in three bf16 terms, ``X^T R`` per block of
        ``bf16.GRADIENT_ROWS`` rows; 8.0 or newer).  ``AUTO`` is ``INT8``.
        The CPU path is float32 products whatever is asked.
    scale : float or None, default None
        The objective's rows are ``X * scale``: uint8 rows (pixels) stay 8-bit, and
        the int8 and bf16 products take them as their own levels with this step
        (no float32 copy); float32 products multiply a float32 copy.
    strict : bool, default False
        Where the tensor-core precision does not apply (rows that are not
        levels, an older GPU): ``False`` runs float32 products and says why in
        ``fallback``; ``True`` raises ValueError.
    out : (params, grad, sums) or None, default None
        Arrays on any GPU where an evaluation in int8 products reads the parameters
        (float32 ``[coef, intercept]``) and writes the coefficient gradient (float32,
        ``d * k``) and the sums ``[grad_intercept, loss]`` (float64) itself: a caller
        that keeps them there (the device L-BFGS) then queues evaluations with
        :meth:`queue`, no copy in or out (``in_place``); ``launch`` is not for it.
    weights : array of shape (n,) or None, default None
        Each row's weight (its residual and cross-entropy are times it).

    Attributes
    ----------
    precision : Precision
        The products that run (``FP32`` on a CPU).
    fallback : str or None
        Why ``precision`` is not the one asked for (None where ``AUTO`` was asked:
        it is then the best that applies).
    launch_note : str or None
        Why our kernels go through Numba's own launch, not the bound one (GPU only).
    in_place : bool
        Whether the evaluations read and write ``out`` itself.
    weighted : bool
        Whether ``weights`` were given.
    one_pass : bool
        Whether float32 products run as one pass over the rows rather than two cuBLAS
        products around the softmax: on the tensor cores in float32 accuracy
        (:mod:`.onepass_tf32`, up to 128 classes, shards of 16,384 rows or more), else,
        for few features and classes, on the float32 cores (:mod:`.cuda_float`).
    tensor_cores : bool
        Whether that pass is :mod:`.onepass_tf32`'s.
    """

    def __init__(self, X: Any, labels: Any, n_classes: int,
                 precision: Precision | str = Precision.FP32, scale: float | None = None,
                 strict: bool = False, out: tuple[Any, Any, Any] | None = None,
                 weights: Any = None) -> None:
        self.requested = Precision.parse(precision, (Precision.AUTO, *PRECISIONS))
        self.asked = Precision.INT8 if self.requested is Precision.AUTO else self.requested
        self.weights = weights
        self.weighted = weights is not None  # ``weights`` becomes ones on a GPU without them
        self.fallback: str | None = None
        if weights is not None and self.asked is not Precision.FP32:
            self.asked = Precision.FP32  # the weighted rows' residuals: float32 products
            if self.requested is not Precision.AUTO:
                self.fallback = f"{self.requested} products take no sample weights: float32"
        self.precision = self.asked
        self.strict = strict
        self.launch_note: str | None = None
        self.in_place, self._bind = False, out
        self.one_pass = False  # float32 rows evaluated in one kernel pass
        self.tensor_cores = False  # that pass on the tensor cores (onepass_tf32)
        self.X, self.labels, self.k = X, labels, int(n_classes)
        self.scale = None if scale is None else float(scale)
        n, d = X.shape
        self.gpu = rows_on_gpu(X)
        if self.gpu:
            self._init_gpu(n, d)
        else:
            self.precision = Precision.FP32
            if self.requested not in (Precision.AUTO, Precision.FP32):
                self.fallback = f"{self.requested} products run on GPUs: float32 on the CPU"
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
        slow = [op.why for op in self._ops if getattr(op, "bound", True) is False]
        if slow:
            self.launch_note = f"kernels launched through Numba's own launch, slower ({slow[0]})"

    def _init_buffers(self, n: int, d: int, k: int) -> None:
        import cupy
        import cupyx

        from . import bf16, cuda, cuda_float, float_pass, int8

        strategies = {Precision.INT8: int8, Precision.BF16: bf16}
        wanted = self.asked
        given = self.X if isinstance(self.X, Levels) else None
        if given is not None:
            self.scale = None  # the levels' step holds it
            if wanted is not Precision.INT8:
                self.X, given = given.rows(), None
        if given is None and not (wanted in strategies and self.X.dtype == np.uint8):
            self.X = cupy.ascontiguousarray(scaled_rows(self.X, self.scale))
            self.scale = None  # applied
        # Labels may come from the host (a local fit of CuPy rows: NumPy codes).
        # A buffer of its own: ``relabel`` writes a later fit's labels into it.
        self.labels = cupy.array(self.labels, dtype=np.int32, copy=True, order="C")
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
        # Whether the evaluation writes every entry of ``sums`` (int8: one kernel sums
        # the blocks' parts into them) or adds into them (atomics: zeroed first).
        self.sums_written = False
        found = None
        if wanted in strategies:
            found = (strategies[wanted].prepare(self, n, d) if given is None
                     else (given.v, given.vt, given.step))
            if found is None:
                need = "in [0, 255] " if wanted is Precision.INT8 else ""
                major, minor = wanted.needs
                why = (f"{wanted} products need rows of 8-bit levels {need}(integer multiples "
                       f"of max|X| / 255, such as pixels / 255) on a GPU of compute "
                       f"capability {major}.{minor} or newer")
                if self.strict:
                    raise ValueError(f"{why}; ask for fp32 products")
                if self.requested is not Precision.AUTO:
                    self.fallback = f"{why}: float32 products instead"
                self.precision = Precision.FP32
                # uint8 rows kept for the levels: float32 after all
                self.X = cupy.ascontiguousarray(scaled_rows(self.X, self.scale))
        if found is not None:
            # int8 writes every entry of its sums (nothing to zero): in place where asked
            self.in_place = wanted is Precision.INT8 and self._bind is not None
            if self.in_place:
                self.params, grad, self.sums = self._bind
                self.grad = grad.reshape(d, k)
            self._ops = strategies[wanted].ops(self, n, d, *found)
        elif float_pass.on_tensor_cores(self, n, d, k):
            self._ops = float_pass.tensor_ops(self, n, d, k)
        elif cuda_float.usable(n, d, k):
            self._ops = float_pass.float_core_ops(self, n, d, k)
        else:
            self.resid = cupy.empty((n, k), dtype=np.float32)
            self.logits = cupy.empty((n, k), dtype=np.float32)
            W = self.params[: d * k].reshape(d, k)
            kernel, blocks, threads, sizes, lanes = cuda.softmax_launch(
                n, k, self.device.attributes["MultiProcessorCount"])
            weighted = self._weights_here()
            self._ops = [
                bound_gemm(self.logits, self.X, W, self.stream),
                bound_launch(kernel,
                             [self.logits.ravel(), *sizes, self.labels, self.params[d * k:],
                              self.weights, int(weighted), lanes, self.resid.ravel(), self.sums],
                             (blocks,), threads,
                             self.stream),
                bound_gemm(self.grad, self.X, self.resid, self.stream, trans_a=True)]

    def _weights_here(self) -> bool:
        """The rows' weights as float32 on this GPU (a one for the kernels to hold where
        none were given); whether they were."""
        import cupy

        self.weights = (cupy.asarray(self.weights, dtype=np.float32) if self.weighted
                        else cupy.ones(1, dtype=np.float32))
        return self.weighted

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

        if self.in_place:
            raise RuntimeError("an objective evaluated in place is queued with queue()")
        dk = coef.size
        self.params_h[:dk] = coef.ravel()
        self.params_h[dk:] = intercept
        stream = self.stream.ptr
        with self.device:
            runtime.memcpyAsync(self.params.data.ptr, self.params_h.ctypes.data,
                                self.params.nbytes, runtime.memcpyHostToDevice, stream)
            if not self.sums_written:
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
            if not self.sums_written:  # else no memset node in the L-BFGS iteration's graph
                runtime.memsetAsync(self.sums.data.ptr, 0, self.sums.nbytes, stream)
            for op in self._ops:
                op()
            runtime.memcpyAsync(grad_to.data.ptr, self.grad.data.ptr, self.grad.nbytes, default,
                                stream)
            runtime.memcpyAsync(sums_to.data.ptr, self.sums.data.ptr, self.sums.nbytes, default,
                                stream)
            done.record(self.stream)

    def queue(self, after: Any, done: Any) -> None:
        """Queue an evaluation in place (``in_place``): on the shard's stream, once event
        ``after`` has fired, read the parameters in ``out`` and write the gradient and
        sums there, then record event ``done``."""
        with self.device:
            self.stream.wait_event(after)
            for op in self._ops:
                op()
            done.record(self.stream)

    def _cpu_xent(self) -> tuple[np.ndarray, np.ndarray]:
        from . import cpu

        cpu.softmax_xent_rows(self.logits, self.labels, self.b, self.resid, self.loss)
        if self.weighted:  # each row's residual and cross-entropy, weighted
            w = np.asarray(self.weights)
            return self.resid * w[:, None].astype(self.resid.dtype), self.loss * w
        return self.resid, self.loss

    def relabel(self, labels: Any) -> None:
        """The same rows with other class indices (``labels``, as many): copied into the
        buffer the evaluations read (on a GPU, in order with them), so everything bound
        to it stays valid."""
        if labels.shape != self.labels.shape:
            raise ValueError(f"{labels.shape[0]} labels for a shard of {self.labels.shape[0]} rows")
        if not self.gpu:
            self.labels = labels
            return
        import cupy

        with self.device, self.stream:
            self.labels[...] = cupy.asarray(labels, dtype=np.int32)

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
