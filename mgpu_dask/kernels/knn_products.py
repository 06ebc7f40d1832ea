"""Operands and the tile product of the KNN distance, per precision, GPU and CPU.

A training block is prepared once per worker (:func:`prepare_train`): its
rows as the product's operand in the precision's dtype (int8, bfloat16 bits,
float32), padded to multiples of 16 rows and features (what int8 tensor cores
ask of cuBLAS), with its row norms.  8-bit data are stored shifted to int8
(``x - 128`` for pixels), which loses nothing: see ``knn_precision``.  Query
blocks are prepared the same way per call (:func:`prepare_queries`).

On a GPU a tile product is one ``cublasGemmEx`` call (tensor cores for int8,
bf16 and tf32) into a reused buffer; on a CPU NumPy's float32 product on
operands rounded as the GPU would round them (exact for 8-bit data), so CI
checks the same logic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import knn_precision as precisions
from ._launch import (
    CUBLAS_COMPUTE,
    CUDA_R_8I,
    CUDA_R_16BF,
    CUDA_R_32F,
    CUDA_R_32I,
    array_module,
    cublas_library,
    on_gpu,
)

PAD = 16  # rows and features are padded to multiples of this


class TrainBlock(NamedTuple):
    """What one worker holds of the training set for one plan entry."""

    operand: Any        # (n_pad, d_pad): int8 (8-bit, GPU int8), uint16 bf16 bits, float32
    rows: Any           # (n, d) float32 exact rows for the re-rank; None when keys are exact
    norms: Any          # (n_pad,) float32 |t|^2 of the rows the keys are about (exact for 8-bit)
    n: int
    d: int
    t_max: float        # largest row norm (the error bound's |t|)
    precision: str
    eight_bit: bool
    shift: int
    method: str         # "gemm" or "direct"
    loops: dict         # per query-block size, the worker's reusable tile loop (knn.TileLoop)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.d)

    def __reduce__(self) -> tuple:  # the tile loops hold GPU buffers and graphs: never pickled
        return (TrainBlock, (*self[:-1], {}))

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.operand, self.rows, self.norms) if a is not None)


def _round_up(n: int, to: int = PAD) -> int:
    return -(-n // to) * to


def padded_shape(rows: int, cols: int) -> tuple[int, int]:
    return _round_up(max(1, rows)), _round_up(max(1, cols))


def _padded(xp: Any, X: Any, dtype: Any, out: Any = None) -> Any:
    if out is None:
        out = xp.zeros(padded_shape(*X.shape), dtype=dtype)
    out[:X.shape[0], :X.shape[1]] = X
    return out


def _to_bf16_bits(xp: Any, X: Any) -> Any:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = xp.ascontiguousarray(X, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
            >> np.uint32(16)).astype(np.uint16)


def _shifted(xp: Any, X: Any, shift: int) -> Any:
    """8-bit values as int8 after subtracting ``shift``; raises on values that do not fit."""
    if X.dtype == np.uint8 and shift == 128:
        return xp.bitwise_xor(X, np.uint8(0x80)).view(np.int8)
    if X.dtype == np.int8 and shift == 0:
        return X
    wide = X.astype(np.float32) - shift
    bad = ~((wide >= -128) & (wide <= 127) & (wide == xp.round(wide)))
    if bool(bad.any()):
        low, high = -128 + shift, 127 + shift
        raise ValueError(f"the rows are not integers in [{low}, {high}] like the training data; "
                         "refit with precision='fp32' to mix such data")
    return wide.astype(np.int8)


def operand_dtype(precision: str, gpu: bool) -> Any:
    if not gpu:
        return np.dtype(np.float32)
    return np.dtype({"int8": np.int8, "bf16": np.uint16}.get(precision, np.float32))


CHUNK_BYTES = 1 << 28
"""Rows are converted this many float32 bytes at a time: the temporaries of a
multi-gigabyte training block stay small (8.1M MNIST rows in one float32 copy
would be 25 GB)."""


def _row_chunks(X: Any, bytes_per_row: int) -> Any:
    step = max(1, CHUNK_BYTES // max(1, bytes_per_row))
    for start in range(0, int(X.shape[0]), step):
        yield start, X[start:start + step]


_PIXEL_KERNELS: dict[str, Any] = {}


def _pixel_kernel(name: str) -> Any:
    """CuPy kernels for uint8 pixels shifted by 128, in one pass: the bf16 bit pattern of
    ``x - 128`` (exact: integers below 2**8 need no rounding) and the row sum of squares."""
    if name not in _PIXEL_KERNELS:
        import cupy

        _PIXEL_KERNELS["bf16"] = cupy.ElementwiseKernel(
            "uint8 x", "uint16 y",
            "y = (unsigned short)(__float_as_uint((float)((int)x - 128)) >> 16)",
            "mgpu_pixels_to_bf16")
        _PIXEL_KERNELS["norms"] = cupy.ReductionKernel(
            "uint8 x", "float64 y", "((long long)x - 128) * ((long long)x - 128)", "a + b",
            "y = (double)a", "0", "mgpu_pixel_sq_norms", reduce_type="long long")
    return _PIXEL_KERNELS[name]


def _fast_pixels(X: Any, precision: str, eight_bit: bool, shift: int) -> bool:
    return (on_gpu(X) and eight_bit and X.dtype == np.uint8 and shift == 128
            and precision in ("bf16", "int8"))


def operand(xp: Any, X: Any, precision: str, eight_bit: bool, shift: int, out: Any = None) -> Any:
    """Rows as the product's padded operand for ``precision`` (CPU: float32, rounded as a GPU).

    Written into ``out`` (zero-padded, shaped by :func:`padded_shape`) when
    given; uint8 pixels on a GPU in one pass, anything else in chunks of
    :data:`CHUNK_BYTES`.
    """
    gpu = on_gpu(X)
    if out is None:
        out = xp.zeros(padded_shape(*X.shape), dtype=operand_dtype(precision, gpu))
    n, d = int(X.shape[0]), int(X.shape[1])
    if _fast_pixels(X, precision, eight_bit, shift):
        if precision == "bf16":
            _pixel_kernel("bf16")(X, out[:n, :d])
        else:
            out[:n, :d] = _shifted(xp, X, shift)
        return out
    for start, part in _row_chunks(X, 4 * d):
        values = _shifted(xp, part, shift) if eight_bit else xp.asarray(part, dtype=np.float32)
        if not gpu:
            values = precisions.round_operand(np.asarray(values, dtype=np.float32), precision)
        elif precision == "bf16":
            values = _to_bf16_bits(xp, values.astype(np.float32))
        elif precision != "int8":
            values = values.astype(np.float32)
        out[start:start + values.shape[0], :values.shape[1]] = values
    return out


def squared_norms(xp: Any, X: Any, eight_bit: bool, shift: int) -> Any:
    """Row norms in float64: exact for 8-bit data (of the shifted rows); computed in chunks."""
    if on_gpu(X) and eight_bit and X.dtype == np.uint8 and shift == 128:
        return _pixel_kernel("norms")(X, axis=1)
    norms = xp.empty(int(X.shape[0]), dtype=np.float64)
    for start, part in _row_chunks(X, 8 * int(X.shape[1])):
        values = (_shifted(xp, part, shift).astype(np.float64) if eight_bit
                  else part.astype(np.float64))
        norms[start:start + values.shape[0]] = (values * values).sum(axis=1)
    return norms


def prepare_train(X: Any, precision: str, eight_bit: bool, shift: int,
                  method: str = "gemm") -> TrainBlock:
    """A training block ready for :func:`mgpu_dask.kernels.knn.local_candidates`."""
    xp = array_module(X)
    n, d = int(X.shape[0]), int(X.shape[1])
    norms64 = squared_norms(xp, X, eight_bit, shift)
    t_max = float(xp.sqrt(norms64.max())) if n else 0.0
    if method == "direct":  # our difference kernel on float32 rows
        rows = xp.ascontiguousarray(X, dtype=np.float32)
        return TrainBlock(rows, rows, xp.zeros(n, np.float32), n, d, t_max, "fp32", eight_bit,
                          shift, method, {})
    op = operand(xp, X, precision, eight_bit, shift)
    norms = xp.zeros(op.shape[0], dtype=np.float32)
    norms[:n] = norms64.astype(np.float32)
    exact = precisions.is_exact(precision, eight_bit, method)
    rows = None if exact else xp.ascontiguousarray(X, dtype=np.float32)
    return TrainBlock(op, rows, norms, n, d, t_max, precision, eight_bit, shift, method, {})


class Queries(NamedTuple):
    operand: Any      # padded like the training operand
    exact: Any        # (m, d) float32 rows for the re-rank (None for exact keys)
    norms: Any        # (m,) float64 |q|^2 (of the shifted rows for 8-bit data)


def prepare_queries(Q: Any, train: TrainBlock, out: Any = None) -> Queries:
    """A query block as the product's operand for ``train`` (into ``out`` when given),
    with its exact norms."""
    xp = array_module(train.norms)
    Q = xp.asarray(Q)
    if Q.ndim != 2 or Q.shape[1] != train.d:
        raise ValueError(f"query rows have {Q.shape[-1]} features, the training rows {train.d}")
    norms = squared_norms(xp, Q, train.eight_bit, train.shift)
    if train.method == "direct":
        Qf = xp.ascontiguousarray(Q, dtype=np.float32)
        if out is not None:
            out[...] = Qf
        return Queries(Qf if out is None else out, Qf, norms)
    op = operand(xp, Q, train.precision, train.eight_bit, train.shift, out)
    exact = None if train.rows is None else xp.ascontiguousarray(Q, dtype=np.float32)
    return Queries(op, exact, norms)


# -- tile products -------------------------------------------------------------------------



class TileProduct:
    """``G = Q[q0:q0+nq] . T[t0:t0+nt]^T`` into a flat buffer (row stride ``nt``).

    GPU: one ``cublasGemmEx`` per tile on the current CuPy stream, operands
    addressed by pointer (no slicing), tensor cores for int8 / bf16 / tf32 and
    pedantic float32 (no TF32) for fp32, called through ctypes so that a
    whole tile loop can be captured in a CUDA graph.  CPU: NumPy's float32
    product.
    """

    def __init__(self, q_operand: Any, train: TrainBlock, capacity: int) -> None:
        self.q, self.t = q_operand, train.operand
        self.gpu = on_gpu(self.t)
        self.direct = train.method == "direct"
        xp = array_module(self.t)
        int_out = self.gpu and train.precision == "int8" and not self.direct
        self.out = xp.empty(capacity, dtype=np.int32 if int_out else np.float32)
        if self.gpu and not self.direct:
            self._bind_cublas(train.precision)

    def _bind_cublas(self, precision: str) -> None:
        import cupy

        self._lib = cublas_library()
        self._handle = cupy.cuda.device.get_cublas_handle()
        in_type = {"int8": CUDA_R_8I, "bf16": CUDA_R_16BF}.get(precision, CUDA_R_32F)
        self._types = (in_type, CUDA_R_32I if precision == "int8" else CUDA_R_32F,
                       CUBLAS_COMPUTE[precision])
        scalars = np.array([1, 0], np.int32) if precision == "int8" else np.array([1, 0], np.float32)
        self._scalars = scalars
        self._one, self._zero = scalars.ctypes.data, scalars.ctypes.data + 4
        self._ld = int(self.t.shape[1])
        self._item = int(self.t.itemsize)

    def __call__(self, q0: int, nq: int, t0: int, nt: int) -> Any:
        if self.direct:
            from . import knn

            knn.sqdist(self.q[q0:q0 + nq], self.t[t0:t0 + nt],
                       out=self.out[:nq * nt].reshape(nq, nt))
            return self.out
        if not self.gpu:
            np.matmul(self.q[q0:q0 + nq], self.t[t0:t0 + nt].T, out=self.out[:nq * nt].reshape(nq, nt))
            return self.out
        import cupy

        in_type, out_type, compute = self._types
        k, item, lib = self._ld, self._item, self._lib
        # Host pointer mode each time: other code may have left the handle in device mode.
        status = (lib.cublasSetStream_v2(self._handle, cupy.cuda.get_current_stream().ptr)
                  or lib.cublasSetPointerMode_v2(self._handle, 0))
        # Row-major G (nq x nt) is column-major G^T = T_tile . Q_tile^T: A = T (op T), B = Q.
        status = status or lib.cublasGemmEx(
            self._handle, 1, 0, nt, nq, k, self._one, self.t.data.ptr + t0 * k * item, in_type, k,
            self.q.data.ptr + q0 * k * item, in_type, k, self._zero, self.out.data.ptr,
            out_type, nt, compute, -1)
        if status:
            raise RuntimeError(f"cuBLAS returned status {status} for a {nq}x{nt}x{k} "
                               f"{self._types} product")
        return self.out
