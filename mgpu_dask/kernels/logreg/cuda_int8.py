"""Numba CUDA kernels of one evaluation on int8 tensor cores, exact for 8-bit levels
(driven by :mod:`.int8`).

Rows of levels 0..255 times one step q (pixels / 255) are, shifted by 128,
int8 values v exactly: ``X = q (v + 128)``.  Then
  X @ W   = q (v @ W) + 128 q colsum(W)        (colsum: per class, float64)
  X^T R   = q (v^T R) + 128 q colsum(R)        (colsum(R): the intercept gradient)
and ``v @ W``, ``v^T R`` run on int8 tensor cores with int32 sums, which are
exact (no rounding at all).  W and R go in as I8_TERMS int8 terms per column:
W's column c scaled so its largest entry is 127, R's entries (softmax -
onehot, within [-1, 1]) times 127; each term is the rounding of what the
ones before left, times 254.  Four terms carry W and R to 2**-32 of the
column's largest entry (float32: 2**-24 of each entry), and the int32 sums
of each term are combined in float64, so an evaluation reads X at one byte
per value and is more exact than float32 products.  int32 cannot overflow:
|v| <= 128 and |term| <= 127, so a product over K values stays below
2**31 for K <= 131,072 (features, or the rows of one gradient block).
Layout: ``w8`` (width x d_pad), the logits' term sums (width x n_pad) and
``resid8`` (width x n_pad), rows ``t k + c`` for term t of class c, zero
rows and columns after (a thread per data row reads and writes them
coalesced); ``v`` (n_pad x d_pad) and its transpose ``vt`` (d_pad x n_pad):
every product is "TN" (both operands K-contiguous), the layout int8 tensor
cores take.
"""

from __future__ import annotations

import math

from numba import cuda, float64, int8, int64, uint8, uint32

from ..blocks import block_max, block_sum
from ..jitable import inlined_device
from .cuda import THREADS, _row_xent
from .cuda_bf16 import LEVEL_TOLERANCE

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
    a WIDE_TILE-square shared tile (one byte per access is slower: docs/performance-history.md).
    Grid: x over v's row tiles, y over its column tiles; 16 x 16 threads."""
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


SPLIT_HELD = 8
"""``split_coef_i8`` holds each thread's first SPLIT_HELD entries of its column in
registers: their loads go out together, not one after another, and the second pass
reads none of them again (a shard on another GPU reads ``params`` over NVLink, where
each wait in a chain is long).  Entries past SPLIT_HELD * THREADS (d > 1024) are read
as they are used."""


@cuda.jit(cache=True)
def split_coef_i8(params, step, w8, colinfo):
    """One block per class c: ``w8[t k + c, :d]``, the int8 terms of ``W[:, c]`` (``params``
    is ``[W (d x k, row-major), intercept (k)]``), and ``colinfo[c]`` (a logit's factor on
    the terms' sums) and ``colinfo[k + c]`` (its offset: ``I8_SHIFT q colsum + intercept``).
    Thread ``tid`` takes entries ``tid, tid + THREADS, ...`` in that order (see SPLIT_HELD)."""
    c = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    k = colinfo.shape[0] // 2
    d = params.shape[0] // k - 1
    held = cuda.local.array(SPLIT_HELD, float64)
    for r in range(SPLIT_HELD):  # a constant count: unrolled, the loads issued together
        j = tid + r * THREADS
        held[r] = float64(params[j * k + c]) if j < d else 0.0
    top = float64(0.0)
    total = float64(0.0)
    for r in range(SPLIT_HELD):
        if tid + r * THREADS < d:
            top = max(top, abs(held[r]))
            total += held[r]
    for j in range(tid + SPLIT_HELD * THREADS, d, THREADS):
        w = float64(params[j * k + c])
        top = max(top, abs(w))
        total += w
    sh = cuda.shared.array(THREADS, float64)
    top = block_max(top, sh)
    total = block_sum(total, sh)
    if top == 0.0:
        top = 1.0
    scale = I8_TOP / top
    for r in range(SPLIT_HELD):
        j = tid + r * THREADS
        if j < d:
            _split_entry(held[r] * scale, w8, c, k, j)
    for j in range(tid + SPLIT_HELD * THREADS, d, THREADS):
        _split_entry(float64(params[j * k + c]) * scale, w8, c, k, j)
    if tid == 0:
        colinfo[c] = step[0] / scale
        colinfo[k + c] = step[0] * I8_SHIFT * total + float64(params[d * k + c])


@inlined_device
def _split_entry(rest, w8, c, k, j):
    """``w8[t k + c, j]`` for every term t of the scaled entry ``rest``."""
    for t in range(I8_TERMS):
        q = math.floor(rest + 0.5)
        w8[t * k + c, j] = int8(int64(q))
        rest = (rest - q) * I8_BASE


@inlined_device
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


@inlined_device
def _combine(g, step, acc, grad, clear):
    """This thread's entry of ``grad`` (flat d x k, float32): entry (f, c) of the
    coefficient gradient from the int32 or int64 term sums ``g`` (blocks x d x width,
    added exactly in int64) and the residual sums ``acc[:k]``; with ``clear``, each sum
    is zeroed as it is read."""
    i = cuda.grid(1)
    d = g.shape[1]
    k = grad.shape[0] // d
    if i >= d * k:
        return
    f = i // k
    c = i - f * k
    total = float64(0.0)
    scale = 1.0 / I8_TOP
    for t in range(I8_TERMS):
        s = int64(0)
        for b in range(g.shape[0]):
            s += g[b, f, t * k + c]
            if clear:
                g[b, f, t * k + c] = 0
        total += float64(s) * scale
        scale /= I8_BASE
    grad[i] = step[0] * (total + I8_SHIFT * acc[c])


@cuda.jit(cache=True)
def combine_i8(g32, step, acc, grad):
    """``grad`` (flat d x k, float32) from the row blocks' int32 term sums ``g32`` (blocks x
    d x width; added exactly in int64) and the residual sums ``acc[:k]``."""
    _combine(g32, step, acc, grad, False)


@cuda.jit(cache=True)
def combine_i8_once(g64, step, acc, grad):
    """``combine_i8`` of sums already added over the row blocks (``g64``: 1 x d x width,
    int64, from ``onepass.cu``'s atomic adds), each zeroed as it is read for the next
    evaluation's adds: the same arithmetic, so the same bits."""
    _combine(g64, step, acc, grad, True)
