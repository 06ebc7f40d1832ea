"""Precision of the KNN distance product: which one, and how far it can be off.

Neighbours are ranked by ``key(q, t) = |t|^2 - 2 q.t``; ``|q - t|^2 = |q|^2 + key``.
The product ``q.t`` is the one expensive step and runs in one of:

=========  ==========================================  ==============================
precision  operands, accumulation                      needs (GPU)
=========  ==========================================  ==============================
``int8``   int8, int32 (tensor cores, IMMA)            8-bit integer data, CC >= 7.5
``bf16``   bfloat16, float32 (tensor cores)            CC >= 8.0
``tf32``   tf32 (10-bit mantissa), float32 (tensor)    CC >= 8.0
``fp32``   float32, float32 (CUDA cores)               any
=========  ==========================================  ==============================

**8-bit data is exact in every precision.**  Pixels are shifted by -128 (uint8)
so every coordinate is an integer in [-128, 127]: exact in int8, bf16 (8-bit
significand), tf32 and fp32.  Each product is an integer of magnitude at most
2^14 and a row of d <= 1024 features sums to at most 2^24 in magnitude, so
every partial sum is an integer that float32 represents exactly: int32 and
float32 accumulation both give the exact product, in any order.  (A shift
changes no distance: ``(q - s) - (t - s) = q - t``.)  Keys are then exact and
no re-ranking is needed; predictions equal a float64 brute force.

**Other data is re-ranked and certified.**  The ``k + margin`` best candidates by
approximate key are re-ranked with exact float64 distances.  The bound relied
on: with unit roundoff ``u`` for the operands (tf32 ``2^-11``, bf16 ``2^-8``,
fp32 0), ``w = 2^-23`` for float32 accumulation (round-to-nearest would give
``2^-24``; truncating adders are allowed for) and ``g = d w / (1 - d w)``,

    |key~ - key| <= 2 ((2u + u^2)(1 + g) + g) |q| |t|  +  2^-24 |t|^2

(the first term bounds the product over all summation orders, by
Cauchy-Schwarz; the second the float32 rounding of the stored norm).  With
``|t| <= tmax`` over the training rows this is a bound ``e(q)`` per query row,
taken twice for safety.  A row is *certified* when the largest approximate
key kept, minus ``e(q)``, is still above the exact k-th key: no column left
out can reach the k nearest.  Rows that fail (rare) are recomputed in float64
against every training row.  The direct difference kernel (``method="direct"``)
accumulates ``(q - t)^2`` in float32: ``|err| <= g (|q| + tmax)^2``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..precision import Precision

PRECISIONS = tuple(Precision)
"""What ``KNeighborsClassifier(precision=...)`` takes."""
OPERAND_ROUNDOFF = {Precision.INT8: 0.0, Precision.BF16: 2.0 ** -8, Precision.FP16: 2.0 ** -11,
                    Precision.TF32: 2.0 ** -11, Precision.FP32: 0.0}
UNDERFLOW = {Precision.FP16: 2.0 ** -25}
"""Absolute rounding of an operand value (float16's subnormals), in scaled units."""
ACCUMULATION_ROUNDOFF = 2.0 ** -23
SAFETY = 2.0


class EightBit(NamedTuple):
    """Whether data is 8-bit integers, and the shift that makes it int8."""

    exact: bool
    shift: int   # subtracted before the product: 128 for [0, 255], 0 for [-128, 127]


def eight_bit_of(dtype: Any, low: float | None = None, high: float | None = None,
                 integral: bool = True) -> EightBit:
    """Classify data by dtype, or by its range and integrality when the dtype is wider."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return EightBit(True, 128)
    if dtype == np.int8:
        return EightBit(True, 0)
    if low is None or high is None or not integral:
        return EightBit(False, 0)
    if 0 <= low and high <= 255:
        return EightBit(True, 128)
    if -128 <= low and high <= 127:
        return EightBit(True, 0)
    return EightBit(False, 0)


def eight_bit_stats(X: np.ndarray) -> tuple[float, float, bool]:
    """(min, max, all integral) of an array, for :func:`eight_bit_of`."""
    if X.size == 0:
        return 0.0, 0.0, True
    if np.issubdtype(X.dtype, np.integer):
        return float(X.min()), float(X.max()), True
    finite = bool(np.isfinite(X).all())
    integral = finite and bool((X == np.round(X)).all())
    return float(np.nanmin(X)), float(np.nanmax(X)), integral


def choose(requested: Precision | str, eight_bit: bool,
           capability: tuple[int, int] | None) -> tuple[Precision, str | None]:
    """The precision to run and a one-line note when it differs from the one asked for.

    Parameters
    ----------
    requested : Precision or {"auto", "int8", "bf16", "fp16", "tf32", "fp32"}
    eight_bit : bool
        The training data are 8-bit integers.
    capability : (major, minor) or None
        The smallest compute capability of the workers' GPUs; None on CPU
        workers, where every precision is emulated.

    Raises
    ------
    ValueError
        ``int8`` asked for on data that are not 8-bit integers, or an unknown name.
    """
    requested = Precision.parse(requested)
    if requested is Precision.INT8 and not eight_bit:
        raise ValueError("precision='int8' needs 8-bit integer data (uint8 pixels or integers "
                         "in [0, 255] or [-128, 127]); use precision='auto'")
    if requested is Precision.AUTO:
        if capability is None:  # CPU: emulated, and fp32 is the honest label for float data
            return (Precision.INT8 if eight_bit else Precision.FP32), None
        # 8-bit data: int8 tensor cores (exact; from compute capability 8.0 the fused
        # search of .fused, which never writes the distances), else fp32.  Float data:
        # float16 tensor cores on centred, scaled rows, certified (module notes).
        order = ((Precision.INT8, Precision.FP32) if eight_bit
                 else (Precision.FP16, Precision.FP32))
        return next(p for p in order if capability >= p.needs), None
    if capability is not None and capability < requested.needs:
        major, minor = requested.needs
        return Precision.FP32, (f"precision {requested} needs a GPU of compute capability "
                                f"{major}.{minor} or newer; running fp32")
    return requested, None


def is_exact(precision: Precision, eight_bit: bool, method: str = "gemm") -> bool:
    """Keys are exact (no re-ranking): 8-bit data through a product (see the module notes)."""
    return eight_bit and method == "gemm"


def error_bound(precision: Precision, d: int, q_norm: Any, t_max: float, method: str = "gemm",
                eight_bit: bool = False, *, scale: float = 1.0, split: bool = False,
                q_err: Any = None, t_err: float | None = None) -> Any:
    """Bound ``e(q)`` on ``|key~ - key|`` for query rows of norm ``q_norm`` (array or float).

    ``q_norm`` and ``t_max`` are norms of the rows as the operands hold them (centred),
    in the data's own units; ``scale`` is the power of two the float16 operands were
    scaled by (their underflow is absolute, ``2^-25`` of a scaled unit); ``split``: the
    three-part float16 product of :mod:`.floats`, whose operands are off by ``u^2``.
    ``q_err`` and ``t_err``: the measured norms of the operands' rounding (each query
    row's, the largest training row's; :class:`.floats.Rounded`), which replace the
    worst case ``u |q|`` and ``u |t|`` in the plain product's bound:
    ``|q~.t~ - q.t| <= |dq| |t| + |q| |dt| + |dq| |dt|`` (Cauchy-Schwarz, underflow
    included, since the rounding is measured as the operands hold it).
    """
    if method == "direct":
        g = d * ACCUMULATION_ROUNDOFF / (1.0 - d * ACCUMULATION_ROUNDOFF)
        return SAFETY * g * (q_norm + t_max) ** 2
    u = 0.0 if eight_bit else OPERAND_ROUNDOFF[Precision(precision)]
    a = UNDERFLOW.get(Precision(precision), 0.0) / scale
    root = d ** 0.5
    terms = 3 * d if split else d
    g = terms * ACCUMULATION_ROUNDOFF / (1.0 - terms * ACCUMULATION_ROUNDOFF)
    t = t_max
    # Every term is linear in the query's norm q (and its measured rounding e): its
    # coefficients are made from scalars first, so that an array of rows takes two to
    # four elementwise operations.  What each part bounds:
    if split:  # qh.th + qh.tl + ql.th: what is left out is u^2 of the product
        # rounding 3.1 u^2 q t + 2 a root (q + t) + 8 d a^2,
        # summed 1.1 g (q + 3 a root)(t + 3 a root)
        b = 3 * a * root
        per_q = 3.1 * u * u * t + 2.0 * a * root + 1.1 * g * (t + b)
        fixed = 2.0 * a * root * t + 8.0 * d * a * a + 1.1 * g * b * (t + b)
        per_e = 0.0
    elif q_err is not None and t_err is not None:
        # rounding e t + q t_err + e t_err, summed g (q + e)(t + t_err)
        per_q = t_err + g * (t + t_err)
        per_e = t + t_err + g * (t + t_err)
        fixed = 0.0
    else:
        # rounding (2u + u^2) q t + (1 + u) a root (q + t) + d a^2,
        # summed g (q (1 + u) + a root)(t (1 + u) + a root)
        c = t * (1 + u) + a * root
        per_q = (2.0 * u + u * u) * t + (1 + u) * a * root + g * (1 + u) * c
        fixed = (1 + u) * a * root * t + d * a * a + g * a * root * c
        per_e = 0.0
    # 2x the product's error, the float32 norm (2^-24 t^2) and the float32 key's own
    # rounding (2^-23 (t^2 + 2 q t))
    per_q = SAFETY * (2.0 * per_q + 2.0 ** -22 * t)
    fixed = SAFETY * (2.0 * fixed + (2.0 ** -24 + 2.0 ** -23) * t * t)
    bound = per_q * q_norm + fixed
    if per_e:
        bound = bound + (SAFETY * 2.0 * per_e) * q_err
    return bound


def round_operand(X: np.ndarray, precision: Precision) -> np.ndarray:
    """Float32 values rounded as a GPU rounds them for ``precision`` (the CPU emulation).

    bf16 keeps 8 significand bits, tf32 11, both rounding to nearest even.
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    if Precision(precision) is Precision.FP16:
        return X.astype(np.float16).astype(np.float32)
    keep = {Precision.BF16: 16, Precision.TF32: 13}.get(precision)
    if keep is None:
        return X
    bits = X.view(np.uint32).astype(np.uint64)
    half = np.uint64(1 << (keep - 1)) - np.uint64(1)
    odd = (bits >> np.uint64(keep)) & np.uint64(1)
    rounded = ((bits + half + odd) >> np.uint64(keep)) << np.uint64(keep)
    return rounded.astype(np.uint32).view(np.float32)


def to_bf16_bits(xp: Any, X: Any) -> Any:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = xp.ascontiguousarray(X, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
            >> np.uint32(16)).astype(np.uint16)
