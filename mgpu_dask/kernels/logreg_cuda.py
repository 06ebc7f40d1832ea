"""Numba CUDA kernels for multinomial logistic regression.

Sections: the float32 evaluation's kernel (below), the bf16 and the int8
tensor-core evaluations (driven by ``logreg_bf16`` and ``logreg_int8``) and
our two passes over X (``logreg_fused``).

``softmax_xent_rows``: one thread per row of ``logits = X @ W``: adds the
intercept, then in one pass the log-sum-exp, the cross-entropy of the true
class and the residual ``softmax - onehot`` (which becomes the coefficient
gradient after one cuBLAS product with ``X^T``).  Each block also sums its
rows' residuals (the intercept gradient) and cross-entropies (the loss) in
shared memory and adds them to ``acc`` with one atomic per class, so a whole
evaluation needs no other kernel.  No warp shuffles: it also runs in the
CUDA simulator.
"""

from __future__ import annotations

import math

from numba import cuda, float32, float64, int8, int64, uint8, uint16, uint32

from .cuda_blocks import block_max, block_sum

THREADS = 128  # threads per block, one row each (the shared reduction is sized by it)


def _row_xent(logit):
    """A device function ``(logits, row, k, info, target) -> (lse, loss)``: one row's
    log-sum-exp and cross-entropy in float64, where logit ``c`` of the row is
    ``logit(logits, row, c, k, info)`` (the split evaluations' logits come from terms)."""

    @cuda.jit(device=True, inline=True)
    def row_xent(logits, row, k, info, target):
        top = logit(logits, row, 0, k, info)
        for c in range(1, k):
            top = max(top, logit(logits, row, c, k, info))
        total = float64(0.0)
        for c in range(k):
            total += math.exp(logit(logits, row, c, k, info) - top)
        lse = top + math.log(total)
        return lse, lse - logit(logits, row, target, k, info)

    return row_xent


@cuda.jit(cache=True)
def softmax_xent_rows(logits, labels, bias, resid, acc):
    """``acc[c] += sum of resid[:, c]`` (c < k) and ``acc[k] += summed cross-entropy``."""
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x * THREADS + tid
    n, k = logits.shape[0], logits.shape[1]
    loss = float64(0.0)
    if row < n:
        top = logits[row, 0] + bias[0]
        for c in range(1, k):
            top = max(top, logits[row, c] + bias[c])
        total = float64(0.0)
        for c in range(k):
            total += math.exp(float64(logits[row, c] + bias[c] - top))
        lse = float64(top) + math.log(total)
        target = labels[row]
        loss = lse - float64(logits[row, target] + bias[target])
        for c in range(k):
            p = math.exp(float64(logits[row, c] + bias[c]) - lse)
            resid[row, c] = p - (1.0 if c == target else 0.0)
    partial = cuda.shared.array(THREADS, float64)
    for c in range(k + 1):  # block sums: each class's residual, then the loss
        value = loss
        if c < k:
            value = float64(resid[row, c]) if row < n else 0.0
        summed = block_sum(value, partial)
        if tid == 0:
            cuda.atomic.add(acc, c, summed)


# -- One evaluation on bf16 tensor cores, exact for 8-bit levels ------------------------------
# Rows whose values are integer multiples ("levels") of one step q, at most
# 256 in magnitude -- pixels scaled by 1/255 -- are exact in bfloat16 as
# levels.  ``X @ W = levels @ (q W)`` and ``X^T R = q levels^T R``: the
# products run on bf16 tensor cores with float32 accumulation (cuBLAS) at
# half the bytes of float32 rows.  ``q W`` and the residual R, which are not
# 8-bit numbers, go in as TERMS bf16 terms each (each term the rounding of
# what the ones before left: 8 more significant bits per term, so three
# terms carry 24 bits, as much as float32).  Layout of ``w2`` and ``resid2``:
# term t in columns [t k, (t + 1) k), zeros after (the column count is padded
# to a multiple of 8 for the tensor cores).

TERMS = 3
LEVEL_TOLERANCE = 2.0 ** -18  # |x/q - round(x/q)| allowed, relative to the level


@cuda.jit(device=True, inline=True)
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


@cuda.jit(device=True, inline=True)
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


# -- One evaluation on int8 tensor cores, exact for 8-bit levels ------------------------------
# Rows of levels 0..255 times one step q (pixels / 255) are, shifted by 128,
# int8 values v exactly: ``X = q (v + 128)``.  Then
#   X @ W   = q (v @ W) + 128 q colsum(W)        (colsum: per class, float64)
#   X^T R   = q (v^T R) + 128 q colsum(R)        (colsum(R): the intercept gradient)
# and ``v @ W``, ``v^T R`` run on int8 tensor cores with int32 sums, which are
# exact (no rounding at all).  W and R go in as I8_TERMS int8 terms per column:
# W's column c scaled so its largest entry is 127, R's entries (softmax -
# onehot, within [-1, 1]) times 127; each term is the rounding of what the
# ones before left, times 254.  Four terms carry W and R to 2**-32 of the
# column's largest entry (float32: 2**-24 of each entry), and the int32 sums
# of each term are combined in float64, so an evaluation reads X at one byte
# per value and is more exact than float32 products.  int32 cannot overflow:
# |v| <= 128 and |term| <= 127, so a product over K values stays below
# 2**31 for K <= 131,072 (features, or the rows of one gradient block).
# Layout: ``w8`` (width x d_pad), the logits' term sums (width x n_pad) and
# ``resid8`` (width x n_pad), rows ``t k + c`` for term t of class c, zero
# rows and columns after (a thread per data row reads and writes them
# coalesced); ``v`` (n_pad x d_pad) and its transpose ``vt`` (d_pad x n_pad):
# every product is "TN" (both operands K-contiguous), the layout int8 tensor
# cores take.

I8_TERMS = 4
I8_TOP = 127.0    # a column's largest entry (W) or 1 (R) becomes this
I8_BASE = 254.0   # each further term: what is left times this (|term| <= 127)
I8_SHIFT = 128    # levels 0..255 minus this are int8
I8_MAX_K = 131072  # longest int32-exact sum of int8 products (features, rows per block)


@cuda.jit(cache=True)
def to_int8_levels(x, inv_step, v, bad):
    """``v[:n, :d] = round(x * inv_step) - I8_SHIFT`` (int8); ``bad[0] = 1`` where a value is
    not within LEVEL_TOLERANCE of an integer level in [0, 255]."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    n, d = x.shape
    for i in range(start, n * d, stride):
        r = i // d
        j = i - r * d
        t = float64(x[r, j]) * inv_step[0]
        q = math.floor(t + 0.5)
        if abs(t - q) > LEVEL_TOLERANCE * max(1.0, abs(q)) or q < 0.0 or q > 255.0:
            bad[0] = 1
            q = float64(I8_SHIFT)
        v[r, j] = int8(int64(q) - I8_SHIFT)


WIDE_TILE = 64  # transpose_bytes: WIDE_TILE x WIDE_TILE bytes per block, 16 x 16 threads
WIDE_PITCH = 65  # WIDE_TILE + 1: a column of the shared tile spreads over the banks


@cuda.jit(cache=True)
def transpose_bytes(v4, vt4):
    """``vt = v.T`` for byte matrices whose sides are multiples of 4, given as uint32 views
    (``v4`` is v's rows of words, ``vt4`` vt's): four bytes per load and per store, through
    a WIDE_TILE-square shared tile (moving one byte per access took three times as long:
    ``benchmarks/results/round10-1xH200/call3-transpose-startprobe/``).  Grid: x over v's row tiles, y over its
    column tiles; 16 x 16 threads."""
    tile = cuda.shared.array((WIDE_TILE, WIDE_PITCH), uint8)
    r0 = cuda.blockIdx.x * WIDE_TILE
    c0 = cuda.blockIdx.y * WIDE_TILE
    tx = cuda.threadIdx.x
    rows, words = v4.shape
    for i in range(cuda.threadIdx.y, WIDE_TILE, 16):
        w = c0 // 4 + tx
        word = v4[r0 + i, w] if r0 + i < rows and w < words else uint32(0)
        for b in range(4):
            tile[i, 4 * tx + b] = uint8((word >> uint32(8 * b)) & uint32(0xFF))
    cuda.syncthreads()
    cols, out_words = vt4.shape
    for i in range(cuda.threadIdx.y, WIDE_TILE, 16):
        w = r0 // 4 + tx
        if c0 + i < cols and w < out_words:
            word = uint32(0)
            for b in range(4):
                word |= uint32(tile[4 * tx + b, i]) << uint32(8 * b)
            vt4[c0 + i, w] = word


def transpose_grid(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``transpose_bytes``'s blocks and threads for a ``rows`` x ``cols`` byte matrix."""
    return (-(-rows // WIDE_TILE), -(-cols // WIDE_TILE)), (16, 16)


@cuda.jit(cache=True)
def split_coef_i8(params, step, w8, colinfo):
    """One block per class c: ``w8[t k + c, :d]``, the int8 terms of ``W[:, c]`` (``params``
    is ``[W (d x k, row-major), intercept (k)]``), and ``colinfo[c]`` (a logit's factor on
    the terms' sums) and ``colinfo[k + c]`` (its offset: ``I8_SHIFT q colsum + intercept``)."""
    c = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    k = colinfo.shape[0] // 2
    d = params.shape[0] // k - 1
    top = float64(0.0)
    total = float64(0.0)
    for j in range(tid, d, THREADS):
        w = float64(params[j * k + c])
        top = max(top, abs(w))
        total += w
    sh = cuda.shared.array(THREADS, float64)
    top = block_max(top, sh)
    total = block_sum(total, sh)
    if top == 0.0:
        top = 1.0
    scale = I8_TOP / top
    for j in range(tid, d, THREADS):
        rest = float64(params[j * k + c]) * scale
        for t in range(I8_TERMS):
            q = math.floor(rest + 0.5)
            w8[t * k + c, j] = int8(int64(q))
            rest = (rest - q) * I8_BASE
    if tid == 0:
        colinfo[c] = step[0] / scale
        colinfo[k + c] = step[0] * I8_SHIFT * total + float64(params[d * k + c])


@cuda.jit(device=True, inline=True)
def _i8_logit(logits, row, c, k, colinfo):
    z = float64(0.0)
    f = float64(1.0)
    for t in range(I8_TERMS):
        z += float64(logits[t * k + c, row]) * f
        f /= I8_BASE
    return colinfo[c] * z + colinfo[k + c]


_i8_xent = _row_xent(_i8_logit)


I8_LOCAL_K = 15  # softmax_xent_i8 holds a row's logits in a local array up to this many
                 # classes (and its block's values in 16 x THREADS float64 of shared memory)
I8_LOCAL_SUMS = 16  # I8_LOCAL_K + 1: a shared array's shape must be literal constants


@cuda.jit(cache=True)
def softmax_xent_i8(logits, labels, colinfo, resid8, bpart):
    """``softmax_xent_i8_wide`` for at most I8_LOCAL_K classes, to the same bits and
    faster: each row's logits are read and put together from their terms once (the wide
    kernel does it three times), and the block's k + 1 sums are reduced together, one
    synchronisation per halving (the wide kernel runs one tree reduction per sum, eight
    synchronisations each) -- in the same order, so every residual term and every block
    sum is the wide kernel's.  Same arguments and outputs."""
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x * THREADS + tid
    n, k = labels.shape[0], colinfo.shape[0] // 2
    part = cuda.shared.array((I8_LOCAL_SUMS, THREADS), float64)
    z = cuda.local.array(I8_LOCAL_K, float64)
    if row < n:
        target = labels[row]
        top = _i8_logit(logits, row, 0, k, colinfo)
        z[0] = top
        for c in range(1, k):
            z[c] = _i8_logit(logits, row, c, k, colinfo)
            top = max(top, z[c])
        total = float64(0.0)
        for c in range(k):
            total += math.exp(z[c] - top)
        lse = top + math.log(total)
        part[k, tid] = lse - z[target]  # the row's cross-entropy
        for c in range(k):
            value = math.exp(z[c] - lse) - (1.0 if c == target else 0.0)
            rest = value * I8_TOP
            for t in range(I8_TERMS):
                q = math.floor(rest + 0.5)
                resid8[t * k + c, row] = int8(int64(q))
                rest = (rest - q) * I8_BASE
            part[c, tid] = value
    else:
        for c in range(k + 1):
            part[c, tid] = 0.0
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:  # cuda_blocks.block_sum's order, for every sum at once
        if tid < stride:
            for c in range(k + 1):
                part[c, tid] += part[c, tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid <= k:
        bpart[cuda.blockIdx.x, tid] = part[tid, 0]


def softmax_xent_i8_for(k: int):
    """The int8 evaluation's softmax kernel for ``k`` classes."""
    return softmax_xent_i8 if k <= I8_LOCAL_K else softmax_xent_i8_wide


@cuda.jit(cache=True)
def softmax_xent_i8_wide(logits, labels, colinfo, resid8, bpart):
    """``softmax_xent_rows`` on the int32 term sums ``logits`` (width x n_pad): the residual
    goes out as int8 terms in ``resid8`` (width x n_pad, one column per row); row ``b`` of
    ``bpart`` gets block b's residual sums per class and its summed cross-entropy (float64,
    no atomics: ``sum_block_parts`` adds them in a fixed order, so an evaluation gives the
    same bits every time -- the coefficient gradient depends on these sums through the
    shift, and atomics' varying order made repeated fits end apart).  Any number of
    classes (``softmax_xent_i8`` is faster up to I8_LOCAL_K)."""
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x * THREADS + tid
    n, k = labels.shape[0], colinfo.shape[0] // 2
    loss = float64(0.0)
    lse = float64(0.0)
    target = 0
    if row < n:
        target = labels[row]
        lse, loss = _i8_xent(logits, row, k, colinfo, target)
    partial = cuda.shared.array(THREADS, float64)
    for c in range(k + 1):  # each class's residual (written as it is summed), then the loss
        value = loss
        if c < k:
            value = 0.0
            if row < n:
                z = _i8_logit(logits, row, c, k, colinfo)
                value = math.exp(z - lse) - (1.0 if c == target else 0.0)
                rest = value * I8_TOP
                for t in range(I8_TERMS):
                    q = math.floor(rest + 0.5)
                    resid8[t * k + c, row] = int8(int64(q))
                    rest = (rest - q) * I8_BASE
        summed = block_sum(value, partial)
        if tid == 0:
            bpart[cuda.blockIdx.x, c] = summed


@cuda.jit(cache=True)
def sum_block_parts(bpart, acc):
    """``acc[c] = bpart[:, c].sum()``, one block per entry, in a fixed order."""
    c = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    total = float64(0.0)
    for b in range(tid, bpart.shape[0], THREADS):
        total += bpart[b, c]
    sh = cuda.shared.array(THREADS, float64)
    total = block_sum(total, sh)
    if tid == 0:
        acc[c] = total


@cuda.jit(cache=True)
def combine_i8(g32, step, acc, grad):
    """``grad`` (flat d x k, float32) from the row blocks' int32 term sums ``g32`` (blocks x
    d x width; added exactly in int64) and the residual sums ``acc[:k]``."""
    i = cuda.grid(1)
    blocks, d = g32.shape[0], g32.shape[1]
    k = grad.shape[0] // d
    if i < d * k:
        f = i // k
        c = i - f * k
        total = float64(0.0)
        scale = 1.0 / I8_TOP
        for t in range(I8_TERMS):
            s = int64(0)
            for b in range(blocks):
                s += g32[b, f, t * k + c]
            total += float64(s) * scale
            scale /= I8_BASE
        grad[i] = step[0] * (total + I8_SHIFT * acc[c])


# -- One evaluation in two passes over X, no cuBLAS --------------------------------------------
# The cuBLAS products of a 10-column problem read X at about a third of the
# memory bandwidth (0.094 + 0.097 ms for MNIST's 52,500 x 784 rows on an
# H200).  These kernels read X once each, coalesced, four loads in flight per
# thread, with the k columns in registers and shared memory; each block
# writes its partial sums and ``sum_blocks`` adds them (no atomics: the same
# sums every time).  Shapes they take: at most MAX_K classes, d x k <= MAX_W
# coefficients, d <= 1024 features; ``ShardObjective`` uses cuBLAS otherwise.

MAX_K = 12            # (the static shared memory of the row pass: 45 KiB of 48)
MAX_W = 7936          # coefficients held in shared memory (31 KiB)
ROW_WARPS = 8         # row pass: one warp per row, 8 rows at a time
MAX_D = 1024          # column pass: one thread per feature
COL_CHUNK = 64        # residual rows staged in shared memory at a time
RED_COLS = 2 * MAX_K  # (a shared array's shape must be a constant, not an expression)


@cuda.jit(device=True, inline=True)
def _add_row_terms(sums, x, w, j, k):
    for c in range(MAX_K):
        if c < k:
            sums[c] += x * w[j * k + c]


@cuda.jit(cache=True)
def row_pass(X, labels, params, resid, bpart):
    """Logits, softmax residual and cross-entropy of every row.

    ``bpart[block] = [residual sum per class, summed cross-entropy]`` of the
    block's rows.  One warp per row: the lanes stride over the features with
    the coefficients in shared memory, then the block combines the lanes'
    partial logits through shared memory (no warp shuffles, so the simulator
    runs it too).  Grid-stride over rows, ROW_WARPS at a time.
    """
    tid = cuda.threadIdx.x
    warp = tid // 32
    lane = tid % 32
    n, d = X.shape[0], X.shape[1]
    k = resid.shape[1]
    dk = d * k
    w = cuda.shared.array(MAX_W, float32)
    part = cuda.shared.array((ROW_WARPS, 32, MAX_K), float32)
    z = cuda.shared.array((ROW_WARPS, MAX_K), float32)
    for e in range(tid, dk, ROW_WARPS * 32):
        w[e] = params[e]
    cuda.syncthreads()
    sums = cuda.local.array(MAX_K, float32)
    own = float64(0.0)   # lane c: residual sum of class c
    loss = float64(0.0)  # lane c: cross-entropy of the rows labelled c
    for r0 in range(cuda.blockIdx.x * ROW_WARPS, n, cuda.gridDim.x * ROW_WARPS):
        row = r0 + warp
        for c in range(MAX_K):
            sums[c] = 0.0
        if row < n:
            j = lane
            while j + 96 < d:  # four loads in flight
                x0 = X[row, j]
                x1 = X[row, j + 32]
                x2 = X[row, j + 64]
                x3 = X[row, j + 96]
                _add_row_terms(sums, x0, w, j, k)
                _add_row_terms(sums, x1, w, j + 32, k)
                _add_row_terms(sums, x2, w, j + 64, k)
                _add_row_terms(sums, x3, w, j + 96, k)
                j += 128
            while j < d:
                _add_row_terms(sums, X[row, j], w, j, k)
                j += 32
        for c in range(MAX_K):
            part[warp, lane, c] = sums[c]
        cuda.syncthreads()
        if lane < k:
            s = float32(0.0)
            for i in range(32):
                s += part[warp, i, lane]
            z[warp, lane] = s + params[dk + lane]
        cuda.syncthreads()
        if row < n and lane < k:
            top = z[warp, 0]
            for c in range(1, k):
                top = max(top, z[warp, c])
            total = float64(0.0)
            for c in range(k):
                total += math.exp(float64(z[warp, c] - top))
            lse = float64(top) + math.log(total)
            target = labels[row]
            r = math.exp(float64(z[warp, lane]) - lse) - (1.0 if lane == target else 0.0)
            resid[row, lane] = r
            own += r
            if lane == target:
                loss += lse - float64(z[warp, lane])
        cuda.syncthreads()  # z and part are rewritten by the next rows
    red = cuda.shared.array((ROW_WARPS, RED_COLS), float64)
    if lane < k:
        red[warp, lane] = own
        red[warp, MAX_K + lane] = loss
    cuda.syncthreads()
    if tid <= k:
        s64 = float64(0.0)
        for i in range(ROW_WARPS):
            if tid < k:
                s64 += red[i, tid]
            else:
                for c in range(k):
                    s64 += red[i, MAX_K + c]
        bpart[cuda.blockIdx.x, tid] = s64


@cuda.jit(device=True, inline=True)
def _add_col_terms(accs, x, rs, rr, k):
    for c in range(MAX_K):
        if c < k:
            accs[c] += x * rs[rr, c]


@cuda.jit(cache=True)
def col_pass(X, resid, partial):
    """``partial[block] = X[rows]^T resid[rows]`` (flat, d x k) over the block's contiguous rows.

    Thread ``j`` owns feature ``j`` (launch at least d threads) and keeps its
    k sums in registers; residual rows are staged in shared memory
    COL_CHUNK at a time and read by every thread (broadcast).
    """
    j = cuda.threadIdx.x
    n, d = X.shape[0], X.shape[1]
    k = resid.shape[1]
    per_block = (n + cuda.gridDim.x - 1) // cuda.gridDim.x
    start = cuda.blockIdx.x * per_block
    end = min(n, start + per_block)
    rs = cuda.shared.array((COL_CHUNK, MAX_K), float32)
    accs = cuda.local.array(MAX_K, float32)
    for c in range(MAX_K):
        accs[c] = 0.0
    for r0 in range(start, end, COL_CHUNK):
        rows = min(COL_CHUNK, end - r0)
        for e in range(j, rows * k, cuda.blockDim.x):
            rs[e // k, e % k] = resid[r0 + e // k, e % k]
        cuda.syncthreads()
        if j < d:
            rr = 0
            while rr + 3 < rows:  # four loads in flight
                x0 = X[r0 + rr, j]
                x1 = X[r0 + rr + 1, j]
                x2 = X[r0 + rr + 2, j]
                x3 = X[r0 + rr + 3, j]
                _add_col_terms(accs, x0, rs, rr, k)
                _add_col_terms(accs, x1, rs, rr + 1, k)
                _add_col_terms(accs, x2, rs, rr + 2, k)
                _add_col_terms(accs, x3, rs, rr + 3, k)
                rr += 4
            while rr < rows:
                _add_col_terms(accs, X[r0 + rr, j], rs, rr, k)
                rr += 1
        cuda.syncthreads()
    if j < d:
        for c in range(MAX_K):
            if c < k:
                partial[cuda.blockIdx.x, j * k + c] = accs[c]


SUM_LANES = 32        # sum_blocks: 32 outputs per block, blockDim.x // 32 partial sums each


@cuda.jit(cache=True)
def sum_blocks(partial, bpart, grad, sums):
    """``grad = sum of partial`` over blocks (float32 out), ``sums = sum of bpart`` (float64).

    Each block takes 32 consecutive outputs; its ``blockDim.x // 32`` thread
    groups read every group-th block's partial (coalesced across the 32) and
    the groups' sums are added in shared memory -- a few dependent loads per
    thread instead of one per block.
    """
    lane = cuda.threadIdx.x % SUM_LANES
    group = cuda.threadIdx.x // SUM_LANES
    groups = cuda.blockDim.x // SUM_LANES
    e = cuda.blockIdx.x * SUM_LANES + lane
    dk = partial.shape[1]
    total = float64(0.0)
    if e < dk:
        for b in range(group, partial.shape[0], groups):
            total += partial[b, e]
    elif e < dk + bpart.shape[1]:
        for b in range(group, bpart.shape[0], groups):
            total += bpart[b, e - dk]
    sh = cuda.shared.array((SUM_LANES, SUM_LANES), float64)
    sh[group, lane] = total
    cuda.syncthreads()
    if group == 0:
        for g in range(1, groups):
            total += sh[g, lane]
        if e < dk:
            grad[e] = total
        elif e < dk + bpart.shape[1]:
            sums[e - dk] = total
