"""Functions our CPU (``njit``) kernels, CUDA kernels and plain Python all call."""

from __future__ import annotations

import contextlib

from numba.extending import register_jitable


def both_targets(fn):
    """``fn`` callable from Numba CPU and CUDA kernels alike (and from Python, as itself)."""
    fn = register_jitable(fn)
    with contextlib.suppress(ImportError, AttributeError, TypeError):
        from numba.cuda.extending import register_jitable as cuda_jitable  # numba-cuda

        cuda_jitable(fn)
    return fn


def inlined_device(fn):
    """``fn`` as a Numba CUDA device function that NVVM inlines into each caller.

    Numba's own inlining (``inline="always"``) types and lowers the function's body
    again inside every caller, which made the Numba front end most of a first
    compile; ``forceinline`` compiles the function once per signature and lets NVVM
    inline the result, which gives the caller the same code.  Where ``forceinline``
    is not known (older numba-cuda, Numba's CUDA simulator) the function is inlined
    by Numba as before.
    """
    from numba import cuda

    try:
        return cuda.jit(device=True, forceinline=True)(fn)
    except TypeError:
        return cuda.jit(device=True, inline=True)(fn)


def bounded_kernel(threads: int, blocks_per_sm: int):
    """``cuda.jit(cache=True)`` for a kernel launched with ``threads`` threads a block, its
    registers capped so that ``blocks_per_sm`` blocks fit one SM (``launch_bounds``):
    kernels that stream memory need the resident warps more than the registers.  Where
    ``launch_bounds`` is not known (older numba-cuda, Numba's CUDA simulator) the kernel
    is compiled without it."""
    from numba import cuda

    def decorate(fn):
        try:
            return cuda.jit(cache=True, launch_bounds=(threads, blocks_per_sm))(fn)
        except TypeError:
            return cuda.jit(cache=True)(fn)
    return decorate
