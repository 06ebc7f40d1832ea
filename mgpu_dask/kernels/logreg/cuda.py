"""Numba CUDA kernel of the float32 evaluation of multinomial logistic regression, and
the row cross-entropy the tensor-core evaluations share (:mod:`.cuda_bf16`,
:mod:`.cuda_int8`).

``softmax_xent_rows``: given ``logits = X @ W``, adds the intercept, then per row the
log-sum-exp, the cross-entropy of the true class and the residual ``softmax -
onehot`` (which becomes the coefficient gradient after one cuBLAS product with
``X^T``), and the residuals' sum per class (the intercept gradient) and the summed
cross-entropy, so a whole evaluation needs no other kernel.  Up to 32 threads
share a row, side by side along it (the loads of a warp fall on a few rows' adjacent
entries, not on 32 rows a row apart), and a grid of a few blocks per SM walks the rows
tile by tile: each block keeps its class sums in shared memory and adds them to the
output once, at the end.  No warp shuffles: it also runs in the CUDA simulator.
"""

from __future__ import annotations

import math

from numba import cuda, float64

from ..blocks import block_sum
from ..jitable import inlined_device

THREADS = 128
"""Threads per block of the tensor-core evaluations' kernels, a row each."""
TILE_THREADS = 256
"""Threads per block of :func:`softmax_xent_rows` (its shared reductions are sized by it)."""
CLASSES_PER_LANE = 16
"""About how many of a row's classes one thread takes (:func:`layout`)."""
SHARED_CLASSES = 1024
"""Classes whose sums a block keeps in shared memory (8 KiB); the sums of further ones
are added to the output tile by tile."""
BLOCKS_PER_SM = 8


def _row_xent(logit):
    """A device function ``(logits, row, k, info, target) -> (lse, loss)``: one row's
    log-sum-exp and cross-entropy in float64, where logit ``c`` of the row is
    ``logit(logits, row, c, k, info)`` (the split evaluations' logits come from terms)."""

    @inlined_device
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
def softmax_xent_rows(logits, labels, bias, weights, weighted, lanes, resid, acc):
    """``acc[c] += sum of resid[:, c]`` (c < k) and ``acc[k] += summed cross-entropy``;
    with ``weighted`` each row's residual and cross-entropy times ``weights[row]``.
    ``lanes`` threads share a row (a power of 2 up to 32, :func:`layout`); any grid:
    block ``b`` takes the tiles ``b, b + grid, ...`` of ``TILE_THREADS // lanes`` rows."""
    tid = cuda.threadIdx.x
    first = tid - tid % lanes
    n, k = logits.shape[0], logits.shape[1]
    rows = TILE_THREADS // lanes
    scratch = cuda.shared.array(TILE_THREADS, float64)
    sums = cuda.shared.array(SHARED_CLASSES, float64)
    for c in range(tid, min(k, SHARED_CLASSES), TILE_THREADS):
        sums[c] = 0.0
    # The column sums: thread t adds rows t // k, t // k + slices, ... of class t % k.
    slices = max(1, TILE_THREADS // k)
    loss = float64(0.0)
    for tile in range(cuda.blockIdx.x, (n + rows - 1) // rows, cuda.gridDim.x):
        row = tile * rows + tid // lanes
        top = -math.inf
        if row < n:
            for c in range(tid - first, k, lanes):
                top = max(top, float64(logits[row, c] + bias[c]))
        scratch[tid] = top
        cuda.syncthreads()
        top = scratch[first]
        for j in range(1, lanes):  # every lane combines its row's parts, in one order
            top = max(top, scratch[first + j])
        cuda.syncthreads()
        total = float64(0.0)
        if row < n:
            for c in range(tid - first, k, lanes):
                total += math.exp(float64(logits[row, c] + bias[c]) - top)
        scratch[tid] = total
        cuda.syncthreads()
        total = float64(0.0)
        for j in range(lanes):
            total += scratch[first + j]
        cuda.syncthreads()
        if row < n:
            lse = top + math.log(total)
            w = float64(weights[row]) if weighted != 0 else 1.0
            target = labels[row]
            for c in range(tid - first, k, lanes):
                p = math.exp(float64(logits[row, c] + bias[c]) - lse)
                resid[row, c] = w * (p - (1.0 if c == target else 0.0))
            if tid == first:
                loss += w * (lse - float64(logits[row, target] + bias[target]))
        cuda.syncthreads()  # the tile's residuals, written, are read by other threads
        here = min(rows, n - tile * rows)
        for e in range(tid, k * slices, TILE_THREADS):
            c = e % k
            part = float64(0.0)
            for r in range(e // k, here, slices):
                part += resid[tile * rows + r, c]
            if c >= SHARED_CLASSES:
                cuda.atomic.add(acc, c, part)
            elif slices == 1:
                sums[c] += part  # this thread's class alone
            else:
                cuda.atomic.add(sums, c, part)
    summed = block_sum(loss, scratch)
    for c in range(tid, min(k, SHARED_CLASSES), TILE_THREADS):
        cuda.atomic.add(acc, c, sums[c])
    if tid == 0:
        cuda.atomic.add(acc, k, summed)


def layout(n_rows: int, n_classes: int, sms: int) -> tuple[int, int, int]:
    """``(blocks, threads, lanes)`` for :func:`softmax_xent_rows` over ``n_rows`` rows of
    ``n_classes`` on a GPU of ``sms`` multiprocessors: about 16 classes a thread (loads
    that do not wait on each other) and as many rows a tile as that leaves, at most
    :data:`BLOCKS_PER_SM` blocks per SM."""
    lanes = 1
    while lanes < 32 and lanes * CLASSES_PER_LANE < n_classes:
        lanes *= 2
    tiles = -(-n_rows // (TILE_THREADS // lanes))
    return max(1, min(tiles, BLOCKS_PER_SM * sms)), TILE_THREADS, lanes
