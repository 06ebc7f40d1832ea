"""Numba CUDA kernels of the float32 evaluation of multinomial logistic regression, and
the row cross-entropy the tensor-core evaluations share (:mod:`.cuda_bf16`,
:mod:`.cuda_int8`).

``softmax_xent_tiles`` (rows of up to :data:`STAGED_CLASSES` classes) and
``softmax_xent_rows`` (any number): given ``logits = X @ W``, add the intercept, then
per row the log-sum-exp, the cross-entropy of the true class and the residual
``softmax - onehot`` (which becomes the coefficient gradient after one cuBLAS product
with ``X^T``), and the residuals' sum per class (the intercept gradient) and the summed
cross-entropy, so a whole evaluation needs no other kernel.  Threads share a row, side
by side along it, and a grid of a few blocks per SM walks the rows tile by tile: each
block keeps its class sums in shared memory and adds them to the output once, at the
end.  ``softmax_xent_rows`` reads each logit from memory where it works on it, one
load at a time per thread; ``softmax_xent_tiles`` first copies a tile's rows into
shared memory with many loads in flight, which is what bounds such a kernel: few
instructions per logit do not help while each thread waits on one load.  No warp
shuffles: both also run in the CUDA simulator.
"""

from __future__ import annotations

import math
from typing import Any

from numba import cuda, float32, float64, uint64

from ..blocks import block_sum
from ..jitable import bounded_kernel, inlined_device

THREADS = 128
"""Threads per block of the tensor-core evaluations' kernels, a row each."""
TILE_THREADS = 256
"""Threads per block of :func:`softmax_xent_rows` (its shared reductions are sized by it)."""
CLASSES_PER_LANE = 25
"""About how many of a row's classes one thread takes (:func:`layout`): fewer make more
rows a tile wait on each other's lanes, more leave the loads of a warp far apart."""
SHARED_CLASSES = 1024
"""Classes whose sums a block keeps in shared memory (8 KiB); the sums of further ones
are added to the output tile by tile."""
BLOCKS_PER_SM = 4
"""Blocks of :func:`softmax_xent_rows` resident on one SM (its registers capped for them)
and launched per SM: uncapped, its registers left room for two, too few warps to keep
the loads in flight (docs/performance-history.md)."""


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


@bounded_kernel(TILE_THREADS, BLOCKS_PER_SM)
def softmax_xent_rows(logits, k, labels, bias, weights, weighted, lanes, resid, acc):
    """``acc[c] += sum of resid[:, c]`` (c < k) and ``acc[k] += summed cross-entropy``;
    with ``weighted`` each row's residual and cross-entropy times ``weights[row]``.
    ``logits`` and ``resid`` are the rows of ``k`` classes one after another (flat views
    of row-major arrays: an entry is one unsigned sum away, no index wraps around).
    ``lanes`` threads share a row (a power of 2 up to 32, :func:`layout`); any grid:
    block ``b`` takes the tiles ``b, b + grid, ...`` of ``TILE_THREADS // lanes`` rows.
    The exponentials are float32, of differences rounded once to float32; their sums,
    the log-sum-exp and the cross-entropy are float64."""
    tid = cuda.threadIdx.x
    first = tid - tid % lanes
    lane = uint64(tid - first)
    step = uint64(lanes)
    width = uint64(k)
    n = logits.shape[0] // k
    rows = TILE_THREADS // lanes
    tops = cuda.shared.array(TILE_THREADS, float32)
    totals = cuda.shared.array(TILE_THREADS, float64)
    sums = cuda.shared.array(SHARED_CLASSES, float64)
    for c in range(tid, min(k, SHARED_CLASSES), TILE_THREADS):
        sums[c] = 0.0
    # The column sums: thread t adds rows t // k, t // k + slices, ... of class t % k.
    slices = max(1, TILE_THREADS // k)
    loss = float64(0.0)
    for tile in range(cuda.blockIdx.x, (n + rows - 1) // rows, cuda.gridDim.x):
        row = tile * rows + tid // lanes
        base = uint64(row) * width
        top = float32(-math.inf)
        total = float64(0.0)
        if row < n:  # the largest logit of this thread's classes and their exp-sum, in one pass
            c = lane
            while c < width:
                z = logits[base + c] + bias[c]
                if z > top:
                    total = total * float64(math.exp(top - z)) + 1.0
                    top = z
                else:
                    total += float64(math.exp(z - top))
                c += step
        tops[tid] = top
        totals[tid] = total
        cuda.syncthreads()
        top = tops[first]
        for j in range(1, lanes):  # every lane combines its row's parts, in one order
            top = max(top, tops[first + j])
        total = float64(0.0)
        for j in range(lanes):
            part_top = tops[first + j]
            if part_top > float32(-math.inf):  # a lane with no class of the row adds nothing
                total += totals[first + j] * float64(math.exp(part_top - top))
        if row < n:
            lse = float64(top) + math.log(total)
            w = float64(weights[row]) if weighted != 0 else 1.0
            target = uint64(labels[row])
            c = lane
            while c < width:
                p = math.exp(float32(float64(logits[base + c] + bias[c]) - lse))
                resid[base + c] = w * (float64(p) - (1.0 if c == target else 0.0))
                c += step
            if tid == first:
                loss += w * (lse - float64(logits[base + target] + bias[target]))
        cuda.syncthreads()  # the tile's residuals, written, are read by other threads
        here = min(rows, n - tile * rows)
        for e in range(tid, k * slices, TILE_THREADS):
            c = e % k
            part = float64(0.0)
            for r in range(e // k, here, slices):
                part += resid[uint64(tile * rows + r) * width + uint64(c)]
            if c >= SHARED_CLASSES:
                cuda.atomic.add(acc, c, part)
            elif slices == 1:
                sums[c] += part  # this thread's class alone
            else:
                cuda.atomic.add(sums, c, part)
    summed = block_sum(loss, totals)
    for c in range(tid, min(k, SHARED_CLASSES), TILE_THREADS):
        cuda.atomic.add(acc, c, sums[c])
    if tid == 0:
        cuda.atomic.add(acc, k, summed)


def layout(n_rows: int, n_classes: int, sms: int) -> tuple[int, int, int]:
    """``(blocks, threads, lanes)`` for :func:`softmax_xent_rows` over ``n_rows`` rows of
    ``n_classes`` on a GPU of ``sms`` multiprocessors: about :data:`CLASSES_PER_LANE` of
    a row's classes a thread and as many rows a tile as that leaves, at most
    :data:`BLOCKS_PER_SM` blocks per SM."""
    lanes = 1
    while lanes < 32 and lanes * CLASSES_PER_LANE < n_classes:
        lanes *= 2
    tiles = -(-n_rows // (TILE_THREADS // lanes))
    return max(1, min(tiles, BLOCKS_PER_SM * sms)), TILE_THREADS, lanes


STAGE = 32
"""Logits of a tile of :func:`softmax_xent_tiles` per thread."""
TILE_VALUES = TILE_THREADS * STAGE
"""Logits a tile of :func:`softmax_xent_tiles` holds in shared memory (32 KiB; a
constant: Numba sizes shared arrays by constants, not by expressions)."""
STAGED_CLASSES = 1024
"""Classes at most of :func:`softmax_xent_tiles` (:func:`tiles_layout` fits at least eight
rows of them a tile); rows of more take :func:`softmax_xent_rows`."""
RUN = 8
"""Logits a thread of :func:`softmax_xent_tiles` copies at once (their loads in flight
together)."""


@bounded_kernel(TILE_THREADS, BLOCKS_PER_SM)
def softmax_xent_tiles(logits, k, pitch, labels, bias, weights, weighted, lanes, resid, acc):
    """:func:`softmax_xent_rows` for rows of at most :data:`STAGED_CLASSES` classes, tile
    by tile through shared memory.  A tile's ``TILE_THREADS // lanes`` rows lie one after
    another in ``logits``: thread ``t`` copies class ``t % k`` of rows ``t // k``, ``t // k
    + slices``, ... (a warp's loads fall on adjacent logits; each thread's
    :data:`RUN` loads are in flight at once) into rows ``pitch`` apart (a warp's rows on
    distinct banks, :func:`tiles_layout`).  A row's ``lanes`` threads then take its largest
    logit, the exponentials of the differences from it (float32, each difference rounded
    once) and their sum, and scale them by the row's ``weight / exp-sum`` (rounded once to
    float32) into residuals, which the copying threads write out as they read them in and
    sum per class.  The exponentials' sums, the log-sum-exp, the cross-entropy and the
    class sums are float64.  Arguments as :func:`softmax_xent_rows`'s, ``pitch`` added."""
    tid = cuda.threadIdx.x
    first = tid - tid % lanes
    lane = uint64(tid - first)
    step = uint64(lanes)
    width = uint64(k)
    stride = uint64(pitch)
    n = logits.shape[0] // k
    rows = TILE_THREADS // lanes
    own = tid // lanes  # this thread's row of a tile
    mine = uint64(own)
    at = mine * stride
    vals = cuda.shared.array(TILE_VALUES, float32)
    biases = cuda.shared.array(STAGED_CLASSES, float32)
    tops = cuda.shared.array(TILE_THREADS, float32)
    totals = cuda.shared.array(TILE_THREADS, float64)
    sums = cuda.shared.array(STAGED_CLASSES, float64)
    for c in range(tid, k, TILE_THREADS):
        biases[c] = bias[c]
        sums[c] = 0.0
    # The copies: class c = e % k of rows e // k + i * slices, for e = tid, tid + threads, ...
    slices = max(1, TILE_THREADS // k)
    gap = uint64(slices)
    s_gap, g_gap, last = gap * stride, gap * width, uint64(RUN - 1) * gap
    copied = uint64(k * slices)
    wide = k > TILE_THREADS  # then slices is 1 and e < k: class e from row 0
    own_class, own_row = uint64(tid % k), uint64(tid // k)
    loss = float64(0.0)
    for tile in range(cuda.blockIdx.x, (n + rows - 1) // rows, cuda.gridDim.x):
        row = tile * rows + own
        here = uint64(min(rows, n - tile * rows))
        start = uint64(tile * rows) * width
        e = uint64(tid)
        while e < copied:  # (a while loop: a range with a step divides for its length)
            r = uint64(0) if wide else own_row
            c = e if wide else own_class
            e += uint64(TILE_THREADS)
            s, g = r * stride + c, start + r * width + c
            while r < here:  # RUN rows at once: their loads in flight together
                if r + last < here:  # all of them (no test each)
                    for i in range(RUN):
                        vals[s + uint64(i) * s_gap] = logits[g + uint64(i) * g_gap]
                else:
                    for i in range(RUN):
                        if r + uint64(i) * gap < here:
                            vals[s + uint64(i) * s_gap] = logits[g + uint64(i) * g_gap]
                r, s, g = r + uint64(RUN) * gap, s + uint64(RUN) * s_gap, g + uint64(RUN) * g_gap
        cuda.syncthreads()
        top = float32(-math.inf)
        if row < n:
            c = lane
            while c < width:
                z = vals[at + c] + biases[c]
                vals[at + c] = z
                top = max(top, z)
                c += step
        tops[tid] = top
        cuda.syncthreads()
        top = tops[first]
        j = uint64(first) + uint64(1)
        while j < uint64(first) + step:  # (while loops: a range counts signed, with checks)
            top = max(top, tops[j])
            j += uint64(1)
        total = float64(0.0)
        if row < n:
            c = lane
            while c < width:
                p = math.exp(vals[at + c] - top)
                vals[at + c] = p
                total += float64(p)
                c += step
        totals[tid] = total
        cuda.syncthreads()
        exp_sum = float64(0.0)
        j = uint64(first)
        while j < uint64(first) + step:  # every lane sums its row's parts, in one order
            exp_sum += totals[j]
            j += uint64(1)
        if row < n:
            w = weights[row] if weighted != 0 else float32(1.0)
            scale = float32(float64(w) / exp_sum)
            c = lane
            while c < width:
                vals[at + c] *= scale
                c += step
            target = uint64(labels[row])
            if target & (step - 1) == lane:  # this thread scaled the true class's entry
                vals[at + target] -= w
            if lane == 0:
                picked = logits[start + mine * width + target] + biases[target]
                loss += float64(w) * (float64(top) + math.log(exp_sum) - float64(picked))
        cuda.syncthreads()  # the tile's residuals, written, are read by other threads
        e = uint64(tid)
        while e < copied:
            r = uint64(0) if wide else own_row
            c = e if wide else own_class
            e += uint64(TILE_THREADS)
            s, g = r * stride + c, start + r * width + c
            part = float64(0.0)
            while r < here:
                if r + last < here:
                    for i in range(RUN):
                        v = vals[s + uint64(i) * s_gap]
                        resid[g + uint64(i) * g_gap] = v
                        part += float64(v)
                else:
                    for i in range(RUN):
                        if r + uint64(i) * gap < here:
                            v = vals[s + uint64(i) * s_gap]
                            resid[g + uint64(i) * g_gap] = v
                            part += float64(v)
                r, s, g = r + uint64(RUN) * gap, s + uint64(RUN) * s_gap, g + uint64(RUN) * g_gap
            if slices == 1:
                sums[c] += part  # this thread's class alone
            else:
                cuda.atomic.add(sums, c, part)
        cuda.syncthreads()  # the next tile's logits replace these residuals
    summed = block_sum(loss, totals)
    for c in range(tid, k, TILE_THREADS):
        cuda.atomic.add(acc, c, sums[c])
    if tid == 0:
        cuda.atomic.add(acc, k, summed)


def tiles_layout(n_rows: int, n_classes: int, sms: int) -> tuple[int, int, int, int]:
    """``(blocks, threads, lanes, pitch)`` for :func:`softmax_xent_tiles` over ``n_rows``
    rows of ``n_classes`` (at most :data:`STAGED_CLASSES`) on a GPU of ``sms``
    multiprocessors: the fewest lanes a row (a power of 2) whose tile of ``TILE_THREADS //
    lanes`` rows, ``pitch`` apart, fits :data:`TILE_VALUES`; ``pitch`` the least at or
    above ``n_classes`` that is an odd multiple of ``lanes`` (below 32), so that the rows
    of a warp start on distinct multiples of ``lanes`` among the 32 banks; at most
    :data:`BLOCKS_PER_SM` blocks per SM."""
    if not 1 <= n_classes <= STAGED_CLASSES:
        raise ValueError(f"softmax_xent_tiles takes 1 to {STAGED_CLASSES} classes, not "
                         f"{n_classes}: softmax_launch picks softmax_xent_rows past that")
    lanes = 1
    while True:
        pitch = n_classes
        while lanes < 32 and pitch % (2 * lanes) != lanes:
            pitch += 1
        if (TILE_THREADS // lanes) * pitch <= TILE_VALUES:  # by 32 lanes at the latest
            break
        lanes *= 2
    tiles = -(-n_rows // (TILE_THREADS // lanes))
    return max(1, min(tiles, BLOCKS_PER_SM * sms)), TILE_THREADS, lanes, pitch


def softmax_kernel(n_classes: int) -> Any:
    """The softmax kernel of rows of ``n_classes``: :func:`softmax_xent_tiles` up to
    :data:`STAGED_CLASSES`, :func:`softmax_xent_rows` beyond."""
    return softmax_xent_tiles if n_classes <= STAGED_CLASSES else softmax_xent_rows


def softmax_launch(n_rows: int, n_classes: int, sms: int) -> tuple[Any, int, int, list[int], int]:
    """``(kernel, blocks, threads, sizes, lanes)`` for :func:`softmax_kernel` over
    ``n_rows`` rows of ``n_classes`` on a GPU of ``sms`` multiprocessors: ``sizes`` are
    the arguments after the logits (``[k]``, or ``[k, pitch]`` for the tiles)."""
    kernel = softmax_kernel(n_classes)
    if kernel is softmax_xent_tiles:
        blocks, threads, lanes, pitch = tiles_layout(n_rows, n_classes, sms)
        return kernel, blocks, threads, [n_classes, pitch], lanes
    blocks, threads, lanes = layout(n_rows, n_classes, sms)
    return kernel, blocks, threads, [n_classes], lanes
