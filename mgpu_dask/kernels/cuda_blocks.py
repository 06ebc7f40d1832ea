"""Numba CUDA device functions shared by our kernels: reductions over one block."""

from __future__ import annotations

from numba import cuda


@cuda.jit(device=True, inline=True)
def block_sum(value, sh):
    """Sum of ``value`` over the block (a power-of-2 size), returned to every thread.

    ``sh`` is a shared array with one slot per thread.
    """
    tid = cuda.threadIdx.x
    sh[tid] = value
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            sh[tid] += sh[tid + stride]
        cuda.syncthreads()
        stride //= 2
    total = sh[0]
    cuda.syncthreads()
    return total


@cuda.jit(device=True, inline=True)
def block_max(value, sh):
    """Largest ``value`` over the block (a power-of-2 size), returned to every thread."""
    tid = cuda.threadIdx.x
    sh[tid] = value
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            sh[tid] = max(sh[tid], sh[tid + stride])
        cuda.syncthreads()
        stride //= 2
    top = sh[0]
    cuda.syncthreads()
    return top
