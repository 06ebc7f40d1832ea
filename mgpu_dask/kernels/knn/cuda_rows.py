"""Numba CUDA kernels for the per-row work around a float search, one launch each.

A warm search of 10,000 queries over 100,000 x 32 float rows spent more host time on
this work than the GPU spent on it: about thirty CuPy operations to make the queries'
float16 operand and twelve to pack the result, each a launch of its own
(docs/performance-history.md, "the per-row work in one launch").

- ``half_query_rows``: a query block as the float16 product's operand
  (:func:`.floats.float_operand`, :func:`.floats.sq_norms`, :func:`.floats.offsets`
  in one pass): each row centred and scaled in float64, clipped to
  :data:`.floats.QUERY_MAX`, rounded to float16 (to nearest, ties to even, from
  float64 at once), and with it what the search needs of the row.
- ``refine_rows_short``: the exact re-rank of ``cuda.refine_rows`` for rows of few
  features, each thread one candidate, no reduction over the block per candidate.
- ``pack_rows``: exact values and columns to packed candidates
  (:func:`.floats.finish` and ``search._pack``).

All three run under Numba's CUDA simulator too, which is how CI checks them against the
code they stand in for (NumPy's, and the CPU twin of the re-rank).
"""

from __future__ import annotations

import math

from numba import config, cuda, float64, int32

from ..blocks import block_max, block_sum
from ..jitable import inlined_device
from .cuda import INT_MAX, MAX_K

ROW_THREADS = 4 if config.ENABLE_CUDASIM else 64
"""Threads a query row (a power of two)."""
REFINE_THREADS = 4 if config.ENABLE_CUDASIM else 64
"""Threads of :func:`refine_rows_short`'s block (each takes every REFINE_THREADS-th
candidate; on a GPU one candidate each, lists being at most MAX_K long)."""
METRIC_CODES = {"euclidean": 0, "sqeuclidean": 1, "cosine": 2, "inner_product": 3}
HALF_MIN_NORMAL = 2.0 ** -14
HALF_SUBNORMAL = 2.0 ** -24


@inlined_device
def _round_even(y):
    """``y`` (>= 0) to the nearest integer, ties to even."""
    r = math.floor(y)
    frac = y - r
    if frac > 0.5 or (frac == 0.5 and r % 2.0 == 1.0):
        r += 1.0
    return r


@inlined_device
def half_bits(x):
    """``(bits, value)``: float16's bits of float64 ``x`` rounded to nearest (ties to even,
    one rounding), and the float64 value they hold; ``|x|`` at most 65504."""
    a = abs(x)
    sign = 0x8000 if x < 0.0 else 0
    if a < HALF_MIN_NORMAL:  # subnormal: multiples of 2^-24 (1024 of them is the first normal)
        q = _round_even(a / HALF_SUBNORMAL)
        return sign | int(q), math.copysign(q * HALF_SUBNORMAL, x)
    m, e = math.frexp(a)  # a = m 2^e, m in [0.5, 1)
    unit = a / (2.0 * m)  # 2^(e - 1), exactly
    q = _round_even((2.0 * m - 1.0) * 1024.0)
    field = int(e) + 14
    bits_q = int(q)
    if bits_q == 1024:  # rounded up to the next power of two
        bits_q = 0
        field += 1
    return sign | (field << 10) | bits_q, math.copysign((1.0 + q / 1024.0) * unit, x)


@cuda.jit(cache=True)
def half_query_rows(Q, center, centred, scale, qmax, part, split, inner, out, wide, error,
                    offsets, q_norm):
    """One block of ROW_THREADS threads per query row of ``Q`` (float32): its float16 operand
    into ``out`` (uint16 bits; ``[hi | hi | lo]`` when ``split``, ``part`` columns apart),
    whether it left float16's range (``wide``), the norm of its rounding (``error``), what
    turns its keys into exact values (``offsets``) and its norm (``q_norm``), unscaled."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    sh = cuda.shared.array(ROW_THREADS, float64)
    d = Q.shape[1]
    big = 0.0
    sq = 0.0
    lost2 = 0.0
    dot = 0.0
    for f in range(tid, d, ROW_THREADS):
        q = float64(Q[row, f])
        v = q
        if centred != 0:
            v -= center[f]
        elif inner != 0:  # an inner product's queries are not centred: -2 q.c
            dot += q * center[f]
        sq += v * v
        v *= scale
        big = max(big, abs(v))
        v = min(max(v, -qmax), qmax)
        hi, hv = half_bits(v)
        lost = v - hv
        lost2 += lost * lost
        out[row, f] = hi
        if split != 0:
            lo, _ = half_bits(lost)
            out[row, part + f] = hi
            out[row, 2 * part + f] = lo
    big = block_max(big, sh)
    sq = block_sum(sq, sh)
    lost2 = block_sum(lost2, sh)
    dot = block_sum(dot, sh)
    if tid == 0:
        scaled = sq * scale * scale
        wide[row] = big > qmax
        error[row] = math.sqrt(lost2) / scale
        offsets[row] = -2.0 * dot if inner != 0 else scaled / (scale * scale)
        q_norm[row] = math.sqrt(scaled) / scale


@cuda.jit(cache=True)
def pack_rows(sq, cols, labels, index, metric, out):
    """Packed candidates ``out[i, j] = [distance, index[col], labels[col]]`` of exact values
    ``sq`` and columns ``cols`` (``[inf, -1, 0]`` where a column is INT_MAX), the distance
    as the metric has it (``METRIC_CODES``); one thread per entry."""
    e = cuda.grid(1)
    m, k = sq.shape
    if e >= m * k:
        return
    i = e // k
    j = e - i * k
    c = cols[i, j]
    if c == INT_MAX:
        out[i, j, 0] = math.inf
        out[i, j, 1] = -1.0
        out[i, j, 2] = 0.0
        return
    s = sq[i, j]
    if metric == 0:
        s = math.sqrt(max(s, 0.0))
    elif metric == 1:
        s = max(s, 0.0)
    elif metric == 2:
        s = max(1.0 + 0.5 * s, 0.0)
    else:
        s = 0.5 * s
    out[i, j, 0] = s
    out[i, j, 1] = float64(index[c])
    out[i, j, 2] = float64(labels[c])


SHORT_ROWS = 128
"""Features up to which :func:`refine_rows_short` serves (each thread one candidate)."""


@cuda.jit(cache=True)
def refine_rows_short(Q, T, cand, k, inner, out_sq, out_idx):
    """:func:`.cuda.refine_rows` for rows of few features (at most :data:`SHORT_ROWS`): one block
    of REFINE_THREADS threads per row, each thread a candidate's whole value at a time,
    summed in feature order as the CPU twin sums it (``cpu.refine_rows``); no reduction over
    the block for each candidate.  Each candidate then finds its place among the row's
    by counting those before it (value, then column, then its place in the list: the
    order ``lists.keep_sorted`` keeps), so that no thread sorts the row alone; a value
    ``keep_sorted`` would never keep (NaN) counts as no candidate."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    if row >= Q.shape[0]:
        return
    vals = cuda.shared.array(MAX_K, float64)
    cols = cuda.shared.array(MAX_K, int32)
    nc = cand.shape[1]
    for j in range(tid, nc, cuda.blockDim.x):
        t = cand[row, j]
        acc = math.inf
        if t >= 0 and t < T.shape[0]:
            acc = 0.0
            for f in range(Q.shape[1]):
                q, v = float64(Q[row, f]), float64(T[t, f])
                if inner != 0:
                    acc -= 2.0 * q * v
                else:
                    acc += (q - v) * (q - v)
        if t < 0 or t >= T.shape[0] or acc != acc:
            acc = math.inf
            t = INT_MAX
        vals[j] = acc
        cols[j] = t
    cuda.syncthreads()
    for j in range(tid, nc, cuda.blockDim.x):
        v, c = vals[j], cols[j]
        place = 0
        for i in range(nc):
            w, e = vals[i], cols[i]
            if w < v or (w == v and (e < c or (e == c and i < j))):
                place += 1
        if place < k:
            out_sq[row, place] = v
            out_idx[row, place] = c
    for j in range(nc + tid, k, cuda.blockDim.x):  # fewer candidates than k
        out_sq[row, j] = math.inf
        out_idx[row, j] = INT_MAX
