"""Numba CUDA device functions shared by our kernels: reductions over one block, and
which block of a grid is the last to finish (:func:`last_block`)."""

from __future__ import annotations

from numba import cuda, int32

from .jitable import inlined_device


@inlined_device
def _add(a, b):
    return a + b


@inlined_device
def _larger(a, b):
    return max(a, b)


def _block_reduce(combine):
    """A device function ``f(value, sh)``: ``combine`` over the block (a power-of-2 size),
    returned to every thread; ``sh`` is a shared array with one slot per thread."""

    @inlined_device
    def reduce(value, sh):
        tid = cuda.threadIdx.x
        sh[tid] = value
        cuda.syncthreads()
        stride = cuda.blockDim.x // 2
        while stride > 0:
            if tid < stride:
                sh[tid] = combine(sh[tid], sh[tid + stride])
            cuda.syncthreads()
            stride //= 2
        out = sh[0]
        cuda.syncthreads()
        return out

    return reduce


block_sum = _block_reduce(_add)   # sum of ``value`` over the block
block_max = _block_reduce(_larger)  # largest ``value`` over the block


LANES = 8
"""Threads that share one row of :func:`row_sums` (a power of 2)."""


def row_reduce(combine):
    """A device function ``f(parts, rows, scratch, out)``: ``out[r]`` = ``combine`` over
    ``parts[r, :]`` for every ``r < rows``, by the whole block, in a fixed order (the same
    bits every time); ``scratch`` and ``out`` are shared arrays of at least
    ``rows * LANES`` and ``rows`` slots.  Each row's entries are read by LANES threads side
    by side, not by one thread in a chain of dependent loads.  ``combine(r, a, b)`` (a
    device function) is told the row, so that rows may be combined differently."""

    @inlined_device
    def reduce(parts, rows, scratch, out):
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        chunks = parts.shape[1]
        for e in range(tid, rows * LANES, nt):
            r = e // LANES
            lane = e - r * LANES
            total = parts[r, lane] if lane < chunks else parts[r, 0]
            for q in range(lane + LANES, chunks, LANES):
                total = combine(r, total, parts[r, q])
            scratch[e] = total
        cuda.syncthreads()
        for r in range(tid, rows, nt):
            total = scratch[r * LANES]
            for lane in range(1, min(LANES, chunks)):
                total = combine(r, total, scratch[r * LANES + lane])
            out[r] = total
        cuda.syncthreads()

    return reduce


@inlined_device
def _add_in_row(r, a, b):
    return a + b


@inlined_device
def _larger_in_row(r, a, b):
    return max(a, b)


row_sums = row_reduce(_add_in_row)       # sum of each row of ``parts``
row_maxes = row_reduce(_larger_in_row)   # largest entry of each row of ``parts``


@inlined_device
def last_block(count, slot, blocks):
    """Whether this block is the last of ``blocks`` blocks to get here, for every thread
    of it.

    Each of those ``blocks`` blocks must call it exactly once, after the writes the last
    one is to read: each thread makes its writes visible to the whole device
    (``threadfence``), then one thread counts the block in ``count[slot]`` (an int32
    array, zero before the launch).  The last block, which sees the count reach
    ``blocks``, sets it back to zero for the next launch, so one array serves a kernel
    launched again and again (a CUDA graph's replays too).  What the last block then does
    runs after every other block's writes: one launch instead of a second, one-block
    kernel.
    """
    flag = cuda.shared.array(1, int32)
    cuda.threadfence()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        last = cuda.atomic.add(count, slot, 1) == blocks - 1
        flag[0] = 1 if last else 0
        if last:
            count[slot] = 0
    cuda.syncthreads()
    return flag[0] == 1
