"""Numba CUDA device functions shared by our kernels: reductions over one block."""

from __future__ import annotations

from numba import cuda

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
