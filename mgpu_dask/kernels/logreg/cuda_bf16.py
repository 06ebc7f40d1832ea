"""Numba CUDA kernels of one evaluation on bf16 tensor cores, exact for 8-bit levels
(driven by :mod:`.bf16`).

Rows whose values are integer multiples ("levels") of one step q, at most
256 in magnitude -- pixels scaled by 1/255 -- are exact in bfloat16 as
levels.  ``X @ W = levels @ (q W)`` and ``X^T R = q levels^T R``: the
products run on bf16 tensor cores with float32 accumulation (cuBLAS) at
half the bytes of float32 rows.  ``q W`` and the residual R, which are not
8-bit numbers, go in as TERMS bf16 terms each (each term the rounding of
what the ones before left: 8 more significant bits per term, so three
terms carry 24 bits, as much as float32).  Layout of ``w2`` and ``resid2``:
term t in columns [t k, (t + 1) k), zeros after (the column count is padded
to a multiple of 8 for the tensor cores).
"""

from __future__ import annotations

import math

from numba import cuda, float64, int64, uint16

from ..blocks import block_sum
from ..jitable import inlined_device
from .cuda import THREADS, _row_xent

TERMS = 3
LEVEL_TOLERANCE = 2.0 ** -18  # |x/q - round(x/q)| allowed, relative to the level


@inlined_device
def bf16_round(v):
    """``v`` rounded to bfloat16 (nearest, ties away): ``(bit pattern, value)``.

    Zero for 0, non-finite and values below bfloat16's normal range; values
    above it saturate (neither occurs for levels, coefficients times a step
    or softmax residuals).
    """
    if v == 0.0 or not math.isfinite(v):
        return uint16(0), 0.0
    m, e = math.frexp(float64(v))  # v = m 2^e, 0.5 <= |m| < 1
    ex = int64(e)
    sign = int64(0)
    if m < 0.0:
        sign = int64(1)
        m = -m
    r = int64(math.floor(m * 256.0 + 0.5))  # 8 significant bits: 128 <= r <= 256
    if r == 256:
        r = int64(128)
        ex += 1
    biased = ex + 126  # (r / 128) 2^(ex - 1), exponent bias 127
    if biased <= 0:
        return uint16(0), 0.0
    if biased >= 255:
        biased, r, ex = int64(254), int64(255), int64(128)
    value = float64(r) * 2.0 ** (ex - 8)  # exact: a power of two
    if sign == 1:
        value = -value
    return uint16((sign << 15) | (biased << 7) | (r - 128)), value


@cuda.jit(cache=True)
def to_levels(x, inv_step, levels, bad):
    """``levels = bf16(round(x * inv_step))`` (flat arrays); ``bad[0] = 1`` where a value is
    not within LEVEL_TOLERANCE of an integer level or the level exceeds 256 in magnitude."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.shape[0], stride):
        t = float64(x[i]) * inv_step[0]
        r = math.floor(t + 0.5)
        if abs(t - r) > LEVEL_TOLERANCE * max(1.0, abs(r)) or abs(r) > 256.0:
            bad[0] = 1
        bits, _ = bf16_round(r)
        levels[i] = bits


@cuda.jit(cache=True)
def split_coef(params, step, w2):
    """``w2[:, t k:(t + 1) k]``: bf16 term ``t`` of ``step * W``, where ``W`` is ``params[:d k]``
    as d x k (row-major) and ``params`` ends with the k intercepts."""
    i = cuda.grid(1)
    d = w2.shape[0]
    k = params.shape[0] // (d + 1)
    if i < d * k:
        f = i // k
        c = i - f * k
        rest = step[0] * float64(params[i])
        for t in range(TERMS):
            bits, value = bf16_round(rest)
            w2[f, t * k + c] = bits
            rest -= value


@inlined_device
def _split_logit(logits2, row, c, k, bias):
    z = float64(bias[c])
    for t in range(TERMS):
        z += logits2[row, t * k + c]
    return z


_split_xent = _row_xent(_split_logit)


@cuda.jit(cache=True)
def softmax_xent_split(logits2, labels, bias, resid2, acc):
    """``softmax_xent_rows`` on split products: logit ``c`` of a row is ``bias[c]`` plus
    ``logits2[row, t k + c]`` over the terms; the residual goes out as bf16 terms
    in ``resid2``; ``acc`` gets the residual sums per class and the summed
    cross-entropy (float64, one atomic per block and entry)."""
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x * THREADS + tid
    n, k = logits2.shape[0], bias.shape[0]
    loss = float64(0.0)
    lse = float64(0.0)
    target = 0
    if row < n:
        target = labels[row]
        lse, loss = _split_xent(logits2, row, k, bias, target)
    partial = cuda.shared.array(THREADS, float64)
    for c in range(k + 1):  # each class's residual (written as it is summed), then the loss
        value = loss
        if c < k:
            value = 0.0
            if row < n:
                z = _split_logit(logits2, row, c, k, bias)
                value = math.exp(z - lse) - (1.0 if c == target else 0.0)
                rest = value
                for t in range(TERMS):
                    bits, part = bf16_round(rest)
                    resid2[row, t * k + c] = bits
                    rest -= part
        summed = block_sum(value, partial)
        if tid == 0:
            cuda.atomic.add(acc, c, summed)


@cuda.jit(cache=True)
def combine_split(g2, step, grad):
    """``grad = step * (sum of g2's TERMS column blocks)``, flat (d x k, row-major, float32);
    ``g2`` is (d, width); k from ``grad``'s size."""
    i = cuda.grid(1)
    d = g2.shape[0]
    k = grad.shape[0] // d
    if i < d * k:
        f = i // k
        c = i - f * k
        total = float64(0.0)
        for t in range(TERMS):
            total += g2[f, t * k + c]
        grad[i] = step[0] * total
