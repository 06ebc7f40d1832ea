"""Operands of the KNN distance product, per precision, GPU and CPU.

A training block is prepared once per worker (:func:`prepare_train`): its
rows as the product's operand in the precision's dtype (int8, bfloat16 bits,
float16, float32), padded to multiples of 16 rows and features (what int8 tensor
cores ask of cuBLAS), with its row norms.  8-bit data are stored shifted to int8
(``x - 128`` for pixels), which loses nothing: see :mod:`.precision`.  Float data
are the metric's rows, centred and scaled (:mod:`.floats`), with the float32 rows
kept for the exact re-rank.  Query blocks are prepared the same way per call
(:func:`prepare_queries`).  On a CPU the operands are float32 rounded as a GPU would
round them for the precision (exact for 8-bit data), so CI checks the same logic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..launch import array_module, on_gpu
from ..precision import Precision
from . import floats
from . import precision as precisions

PAD = 16  # rows and features are padded to multiples of this


class TrainBlock(NamedTuple):
    """What one worker holds of the training set for one plan entry."""

    operand: Any        # (n_pad, d_pad): int8 (8-bit, GPU int8), uint16 bf16 bits, float16,
                        # float32; a split float16 operand holds three parts (floats.Frame)
    rows: Any           # (n, d) float32 exact rows for the re-rank; None when keys are exact
    norms: Any          # (n_pad,) float32 |t|^2 of the rows as the operand holds them (0: an
                        # inner product's key has none)
    n: int
    d: int
    t_max: float        # largest norm of a row as the operand holds it, unscaled (the bound's |t|)
    t_err: float | None  # largest norm of a float16 row's rounding, unscaled (None: not float16)
    precision: Precision
    eight_bit: bool
    shift: int
    method: str         # "gemm" or "direct"
    metric: str         # floats.METRICS
    frame: Any          # floats.Frame of float data (centre, scale, split), None for 8-bit data
    loops: dict         # per query-block size, the worker's reusable tile loop (search.TileLoop)

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


def operand_dtype(precision: Precision, gpu: bool) -> Any:
    if not gpu:
        return np.dtype(np.float32)
    return np.dtype({Precision.INT8: np.int8, Precision.BF16: np.uint16,
                     Precision.FP16: np.float16}.get(precision, np.float32))


def operand_shape(rows: int, d: int, frame: Any) -> tuple[int, int]:
    """The padded operand of ``rows`` rows: three parts of a split float16 operand."""
    n_pad, d_pad = padded_shape(rows, d)
    return (n_pad, 3 * frame.part) if frame is not None and frame.part else (n_pad, d_pad)


CHUNK_BYTES = 1 << 28
"""Rows are converted this many float32 bytes at a time: the temporaries of a
multi-gigabyte training block stay small (8.1M MNIST rows in one float32 copy
would be 25 GB)."""


def _row_chunks(X: Any, bytes_per_row: int) -> Any:
    step = max(1, CHUNK_BYTES // max(1, bytes_per_row))
    for start in range(0, int(X.shape[0]), step):
        yield start, X[start:start + step]


_PIXEL_KERNELS: dict[str, Any] = {}

_SQ_NORMS = r"""
extern "C" __global__ void mgpu_pixel_sq_norms(const unsigned char* x, double* y,
                                               long long n, long long d) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) return;  // the whole warp: one row per warp
    const unsigned char* r = x + row * d;
    long long acc = 0;
    for (long long j = lane; j < d; j += 32) {
        long long v = (long long)r[j] - 128;
        acc += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row] = (double)acc;
}
"""
"""The row sum of squares of uint8 pixels shifted by 128, one warp per row.  Plain CUDA:
a ``cupy.ReductionKernel`` includes CUB's block reduction, which NVRTC compiles in a
first run for a sum that needs only a warp shuffle (the cost: docs/performance-history.md)."""

_NORM_ROWS_PER_BLOCK = 8


def _pixel_kernel(name: str) -> Any:
    """CuPy kernels for uint8 pixels shifted by 128, in one pass: the bf16 bit pattern of
    ``x - 128`` (exact: integers below 2**8 need no rounding) and the row sum of squares."""
    if name not in _PIXEL_KERNELS:
        import cupy

        _PIXEL_KERNELS["bf16"] = cupy.ElementwiseKernel(
            "uint8 x", "uint16 y",
            "y = (unsigned short)(__float_as_uint((float)((int)x - 128)) >> 16)",
            "mgpu_pixels_to_bf16")
        _PIXEL_KERNELS["norms"] = cupy.RawKernel(_SQ_NORMS, "mgpu_pixel_sq_norms")
    return _PIXEL_KERNELS[name]


def _pixel_sq_norms(X: Any) -> Any:
    """Float64 row sums of ``(x - 128) ** 2`` of uint8 rows on the GPU (exact)."""
    import cupy

    X = cupy.ascontiguousarray(X)
    n, d = int(X.shape[0]), int(X.shape[1])
    out = cupy.empty(n, dtype=np.float64)
    if n:
        blocks = (n + _NORM_ROWS_PER_BLOCK - 1) // _NORM_ROWS_PER_BLOCK
        _pixel_kernel("norms")((blocks,), (32 * _NORM_ROWS_PER_BLOCK,),
                               (X, out, np.int64(n), np.int64(d)))
    return out


def _fast_pixels(X: Any, precision: Precision, eight_bit: bool, shift: int) -> bool:
    return (on_gpu(X) and eight_bit and X.dtype == np.uint8 and shift == 128
            and precision in (Precision.BF16, Precision.INT8))


def operand(xp: Any, X: Any, precision: Precision, eight_bit: bool, shift: int, out: Any = None) -> Any:
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
        if precision is Precision.BF16:
            _pixel_kernel("bf16")(X, out[:n, :d])
        else:
            out[:n, :d] = _shifted(xp, X, shift)
        return out
    for start, part in _row_chunks(X, 4 * d):
        values = _shifted(xp, part, shift) if eight_bit else xp.asarray(part, dtype=np.float32)
        if not gpu:
            values = precisions.round_operand(np.asarray(values, dtype=np.float32), precision)
        elif precision is Precision.BF16:
            values = precisions.to_bf16_bits(xp, values.astype(np.float32))
        elif precision is not Precision.INT8:
            values = values.astype(np.float32)
        out[start:start + values.shape[0], :values.shape[1]] = values
    return out


def squared_norms(xp: Any, X: Any, eight_bit: bool, shift: int) -> Any:
    """Row norms in float64: exact for 8-bit data (of the shifted rows); computed in chunks."""
    if on_gpu(X) and eight_bit and X.dtype == np.uint8 and shift == 128:
        return _pixel_sq_norms(X)
    norms = xp.empty(int(X.shape[0]), dtype=np.float64)
    for start, part in _row_chunks(X, 8 * int(X.shape[1])):
        values = (_shifted(xp, part, shift).astype(np.float64) if eight_bit
                  else part.astype(np.float64))
        norms[start:start + values.shape[0]] = (values * values).sum(axis=1)
    return norms


def prepare_train(X: Any, precision: Precision | str, eight_bit: bool, shift: int,
                  method: str = "gemm", metric: str = "euclidean",
                  split: bool = False) -> TrainBlock:
    """A training block ready for :func:`mgpu_dask.kernels.knn.local_candidates`.

    ``metric`` is one of :data:`.floats.METRICS`; 8-bit data under ``euclidean`` or
    ``sqeuclidean`` keep their exact integer keys.  ``split``: a float16 operand in
    three parts, which a search uses for the rows that the plain one could not certify.
    """
    precision = Precision(precision)
    floats.check_metric(metric)
    xp = array_module(X)
    n, d = int(X.shape[0]), int(X.shape[1])
    if eight_bit and not floats.inner(metric):
        norms64 = squared_norms(xp, X, eight_bit, shift)
        t_max = float(xp.sqrt(norms64.max())) if n else 0.0
        if method == "direct":  # our difference kernel on float32 rows
            rows = xp.ascontiguousarray(X, dtype=np.float32)
            return TrainBlock(rows, rows, xp.zeros(n, np.float32), n, d, t_max, None,
                              Precision.FP32, eight_bit, shift, method, metric, None, {})
        op = operand(xp, X, precision, eight_bit, shift)
        norms = xp.zeros(op.shape[0], dtype=np.float32)
        norms[:n] = norms64.astype(np.float32)
        exact = precisions.is_exact(precision, eight_bit, method)
        rows = None if exact else xp.ascontiguousarray(X, dtype=np.float32)
        return TrainBlock(op, rows, norms, n, d, t_max, None, precision, eight_bit, shift, method,
                          metric, None, {})
    if method == "direct" and floats.inner(metric):
        raise ValueError(f"method='direct' computes distances; metric={metric!r} takes "
                         "method='gemm'")
    rows = floats.metric_rows(xp, X, metric)
    if method == "direct":
        norms = xp.zeros(n, np.float32)
        t_max = float(xp.sqrt((rows.astype(np.float64) ** 2).sum(axis=1).max())) if n else 0.0
        return TrainBlock(rows, rows, norms, n, d, t_max, None, Precision.FP32, False, 0, method,
                          metric, None, {})
    frame = floats.frame_of(xp, rows, precision, split)
    gpu = on_gpu(X)
    op = xp.zeros(operand_shape(n, d, frame), dtype=operand_dtype(precision, gpu))
    rounded = floats.float_operand(xp, rows, precision, frame, query=False, metric=metric,
                                   out=op, gpu=gpu)
    centred = floats.sq_norms(xp, rows, frame, metric, query=False)
    t_max = float(xp.sqrt(centred.max())) / frame.scale if n else 0.0
    t_err = None if rounded is None else (float(rounded.error.max()) if n else 0.0)
    norms = xp.zeros(op.shape[0], dtype=np.float32)
    if not floats.inner(metric):
        norms[:n] = centred.astype(np.float32)
    return TrainBlock(op, rows, norms, n, d, t_max, t_err, precision, False, 0, method, metric,
                      frame, {})


class Queries(NamedTuple):
    operand: Any      # padded like the training operand
    exact: Any        # (m, d) float32 rows for the re-rank (None for exact keys)
    norms: Any        # (m,) float64: what turns a key into the exact value (|q|^2 of the
                      # shifted rows for 8-bit data; floats.offsets for float data)
    q_norm: Any       # (m,) float64 norm of each row as the operand holds it, unscaled
    wide: Any         # (m,) bool: float16 rows past its range (searched in float64), or None
    q_err: Any        # (m,) float64 norm of each float16 row's rounding, unscaled, or None


def prepare_queries(Q: Any, train: TrainBlock, out: Any = None) -> Queries:
    """A query block as the product's operand for ``train`` (into ``out`` when given),
    with its exact norms."""
    xp = array_module(train.norms)
    Q = xp.asarray(Q)
    if Q.ndim != 2 or Q.shape[1] != train.d:
        raise ValueError(f"query rows have {Q.shape[-1]} features, the training rows {train.d}")
    if train.frame is None and train.method != "direct":  # 8-bit data, integer keys
        norms = squared_norms(xp, Q, train.eight_bit, train.shift)
        op = operand(xp, Q, train.precision, train.eight_bit, train.shift, out)
        exact = None if train.rows is None else xp.ascontiguousarray(Q, dtype=np.float32)
        return Queries(op, exact, norms, xp.sqrt(norms), None, None)
    rows = floats.metric_rows(xp, Q, train.metric)
    if train.method == "direct":
        norms = (rows.astype(np.float64) ** 2).sum(axis=1)
        if out is not None:
            out[...] = rows
        return Queries(rows if out is None else out, rows, norms, xp.sqrt(norms), None, None)
    if out is None:
        out = xp.zeros(operand_shape(int(Q.shape[0]), train.d, train.frame),
                       dtype=train.operand.dtype)
    if train.precision is Precision.FP16 and on_gpu(train.norms):  # one launch, not thirty
        wide, error, offs, q_norm = floats.half_queries(xp, rows, train.frame, train.metric, out)
        return Queries(out, rows, offs, q_norm, wide, error)
    rounded = floats.float_operand(xp, rows, train.precision, train.frame, query=True,
                                   metric=train.metric, out=out, gpu=on_gpu(train.norms))
    scaled = floats.sq_norms(xp, rows, train.frame, train.metric, query=True)
    wide = None if rounded is None else rounded.largest > floats.QUERY_MAX
    return Queries(out, rows, floats.offsets(xp, rows, train.frame, train.metric, scaled),
                   xp.sqrt(scaled) / train.frame.scale, wide,
                   None if rounded is None else rounded.error)
