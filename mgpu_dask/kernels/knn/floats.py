"""Float data as the KNN product's operands: the metric's rows, centred and scaled.

Every metric ranks by a key ``|t|^2 - 2 q.t`` (``euclidean``, ``sqeuclidean``) or
``-2 q.t`` (``cosine`` on rows normalised to unit length, ``inner_product``), so one
search serves all four.  Before the reduced-precision product the training rows are
centred on their mean ``c`` -- distances do not change (``(q - c) - (t - c) = q - t``),
and an inner product changes by ``q.c`` for every training row alike, so its ranking does
not either (the queries of an inner product are then not centred) -- which shrinks the
norms that the product's error bound grows with (:mod:`.precision`).  For float16
operands the centred rows are also scaled by a power of two, so that they sit well inside
float16's range (:data:`TRAIN_MAX`), and a query that would leave it is searched again in
float64.  With ``split`` a float16 operand is three parts side by side,
``[hi | hi | lo]`` for queries and ``[hi | lo | hi]`` for training rows, where
``hi = fp16(x)`` and ``lo = fp16(x - hi)``: one product over all three parts is
``qh.th + qh.tl + ql.th``, close to a float32 product at three times float16's cost,
and a product over the first part alone is the plain float16 one.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..precision import Precision

METRICS = ("euclidean", "sqeuclidean", "cosine", "inner_product")
"""What ``metric=`` takes: scikit-learn's names, and ``inner_product`` (largest first)."""
TRAIN_MAX = 2.0 ** 12
"""Float16 operands: the largest centred training value is scaled to at most this, which
leaves queries 16 times the training rows' spread before float16's 65504."""
QUERY_MAX = 2.0 ** 15
"""A scaled query value above this is not put in float16: its row is searched in float64."""
CHUNK_BYTES = 1 << 28
"""Rows are converted this many float64 bytes at a time (the temporaries stay small)."""


def inner(metric: str) -> bool:
    """Whether ``metric`` ranks by ``-2 q.t`` (no norms in the key)."""
    return metric in ("cosine", "inner_product")


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} must be one of {', '.join(METRICS)}")
    return metric


class Frame(NamedTuple):
    """How float rows become operands: the centre subtracted, the scale and the split."""

    center: Any          # (d,) float64 mean of the training rows, or None (8-bit data)
    scale: float         # a power of two (1.0 but for float16)
    part: int | None     # columns of one part of a split float16 operand, or None


def _chunks(X: Any) -> Any:
    """``(start, rows)`` of ``X``, :data:`CHUNK_BYTES` of float64 values at a time."""
    step = max(1, CHUNK_BYTES // (8 * max(1, int(X.shape[1]))))
    for start in range(0, int(X.shape[0]), step):
        yield start, X[start:start + step]


def _centred(X: Any, frame: Frame, metric: str, query: bool) -> Any:
    """``(rows, values)`` a chunk at a time: the rows' float64 values less the frame's
    centre (an inner product's queries as they are), not yet scaled."""
    center = None if (query and inner(metric)) else frame.center
    for start, part in _chunks(X):
        v = part.astype(np.float64)
        yield slice(start, start + part.shape[0]), (v if center is None else v - center)


def metric_rows(xp: Any, X: Any, metric: str) -> Any:
    """The rows the metric compares, as float32: cosine's normalised to unit length
    (a zero row stays zero, as scikit-learn's ``normalize`` leaves it)."""
    rows = xp.ascontiguousarray(X, dtype=np.float32)
    if metric != "cosine":
        return rows
    out = xp.empty_like(rows)
    for start, part in _chunks(rows):
        wide = part.astype(np.float64)
        norms = xp.sqrt((wide * wide).sum(axis=1, keepdims=True))
        out[start:start + part.shape[0]] = wide / xp.where(norms > 0, norms, 1.0)
    return out


def frame_of(xp: Any, rows: Any, precision: Precision, split: bool) -> Frame:
    """The centre and scale of training ``rows`` (float32, as :func:`metric_rows` gives them)."""
    n, d = int(rows.shape[0]), int(rows.shape[1])
    center = xp.zeros(d, dtype=np.float64)
    for _, part in _chunks(rows):
        center += part.astype(np.float64).sum(axis=0)
    center /= max(1, n)
    scale = 1.0
    if precision is Precision.FP16 and n:
        spread = 0.0
        for _, part in _chunks(rows):
            spread = max(spread, float(xp.abs(part.astype(np.float64) - center).max()))
        if spread > 0:
            scale = 2.0 ** math.floor(math.log2(TRAIN_MAX / spread))
    # whole stages a part, so that the plain product's loads never reach into the next part
    part = part_columns(d) if precision is Precision.FP16 and split else None
    return Frame(center, scale, part)


def part_columns(d: int) -> int:
    """Columns of one part of a float16 operand of ``d`` features: whole 64-byte stages
    of the fused search (32 float16 values)."""
    return -(-max(1, d) // 32) * 32


def _fp16_values(xp: Any, v: Any, gpu: bool) -> Any:
    """float64 values rounded to float16: float16 on a GPU, their float32 values on a CPU
    (where NumPy multiplies them in float32, as the tensor cores accumulate)."""
    half = v.astype(np.float16)
    return half if gpu else half.astype(np.float32)


class Rounded(NamedTuple):
    """What float16 operands lost, per row, so that the search can bound its keys by it."""

    largest: Any   # (rows,) each row's largest scaled value (past QUERY_MAX: float64)
    error: Any     # (rows,) |v - fp16(v)|, the norm of the row's rounding, in data units


def float_operand(xp: Any, X: Any, precision: Precision, frame: Frame, *, query: bool,
                  metric: str, out: Any, gpu: bool) -> Rounded | None:
    """Float rows into ``out`` (zero-padded) as the product's operand for ``precision``,
    centred and scaled by ``frame``.  For float16 returns what the rows lost
    (:class:`Rounded`): the caller sends rows past :data:`QUERY_MAX` elsewhere, and bounds
    the plain product by each row's measured rounding rather than by float16's worst
    case (about half of it on most data).  None for other precisions."""
    from . import precision as precisions

    d = int(X.shape[1])
    half = precision is Precision.FP16
    largest = xp.zeros(int(X.shape[0]), dtype=np.float64) if half else None
    error = xp.zeros(int(X.shape[0]), dtype=np.float64) if half else None
    for rows, v in _centred(X, frame, metric, query):
        if frame.scale != 1.0:
            v = v * frame.scale
        if half:
            big = xp.abs(v).max(axis=1) if d else xp.zeros(v.shape[0])
            largest[rows] = big
            v = xp.clip(v, -QUERY_MAX, QUERY_MAX)  # past it the row is searched in float64
            hi = _fp16_values(xp, v, gpu)
            out[rows, :d] = hi
            lost = v - hi.astype(np.float64)
            error[rows] = xp.sqrt((lost * lost).sum(axis=1)) / frame.scale
            if frame.part is not None:
                p = frame.part
                lo = _fp16_values(xp, lost, gpu)
                out[rows, p:p + d] = hi if query else lo
                out[rows, 2 * p:2 * p + d] = lo if query else hi
            continue
        values = v.astype(np.float32)
        if not gpu:
            values = precisions.round_operand(values, precision)
        elif precision is Precision.BF16:
            values = precisions.to_bf16_bits(xp, values)
        out[rows, :d] = values
    return Rounded(largest, error) if half else None


def half_queries(xp: Any, rows: Any, frame: Frame, metric: str, out: Any) -> tuple[Any, ...]:
    """Query ``rows`` (float32, as :func:`metric_rows` gives them) into ``out`` as the float16
    operand, in one launch of ``cuda_rows.half_query_rows`` (CuPy arrays, or NumPy ones
    under Numba's CUDA simulator): what :func:`float_operand`, :func:`sq_norms` and
    :func:`offsets` give, as ``(wide, error, offsets, q_norm)``, ``wide`` the rows past
    :data:`QUERY_MAX`, ``q_norm`` each row's norm as the operand holds it, unscaled."""
    from ..launch import launch
    from . import cuda_rows

    m = int(rows.shape[0])
    wide = xp.empty(m, dtype=bool)  # the kernel writes every row's entries
    error, offs, q_norm = (xp.empty(m, dtype=np.float64) for _ in range(3))
    if m:
        part = frame.part
        ip = inner(metric)
        launch(cuda_rows.half_query_rows, m, cuda_rows.ROW_THREADS, rows, frame.center,
               int(not ip), float(frame.scale), QUERY_MAX, int(part or 0), int(part is not None),
               int(ip), out.view(np.uint16), wide, error, offs, q_norm)
    return wide, error, offs, q_norm


def sq_norms(xp: Any, X: Any, frame: Frame, metric: str, query: bool) -> Any:
    """Float64 squared norms of the rows as the operand holds them (centred, scaled)."""
    out = xp.empty(int(X.shape[0]), dtype=np.float64)
    for rows, v in _centred(X, frame, metric, query):
        out[rows] = (v * v).sum(axis=1) * frame.scale ** 2
    return out


def offsets(xp: Any, Q: Any, frame: Frame, metric: str, norms: Any) -> Any:
    """What turns a query row's key (original units) into its exact value: ``|q - c|^2``
    for a distance (``norms``, scaled, brought back), ``-2 q.c`` for an inner product."""
    if not inner(metric):
        return norms / frame.scale ** 2
    if frame.center is None:
        return xp.zeros(int(Q.shape[0]), dtype=np.float64)
    out = xp.empty(int(Q.shape[0]), dtype=np.float64)
    for start, part in _chunks(Q):
        out[start:start + part.shape[0]] = -2.0 * (part.astype(np.float64) @ frame.center)
    return out


def finish(xp: Any, sq: Any, metric: str) -> Any:
    """The metric's distance from an exact value ``sq`` (``|q - t|^2``, or ``-2 q.t``):
    ``inner_product``'s is ``-q.t``, so that every metric's nearest comes first."""
    if metric == "euclidean":
        return xp.sqrt(xp.maximum(sq, 0.0))
    if metric == "sqeuclidean":
        return xp.maximum(sq, 0.0)
    if metric == "cosine":
        return xp.maximum(1.0 + 0.5 * sq, 0.0)
    return 0.5 * sq
