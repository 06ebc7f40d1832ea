"""The deformation kernel on the GPU: one block per output row, a thread per pixel.

Imported only where a GPU (or the CUDA simulator) is used; the CPU twin is
``rows.deform_cpu``.  Both evaluate :mod:`.arithmetic` in integers.
"""

from __future__ import annotations

from numba import cuda, int64

from . import arithmetic as dm

N_DRAWS = dm.N_DRAWS  # a module global: a compile-time constant for the shared array


@cuda.jit(cache=True)
def deform_rows(src, out, seed, row0, side, shift_q8, tan_q14, scale_q14, shear_q14, elastic_q8):
    draws = cuda.shared.array(N_DRAWS, int64)
    n_src = src.shape[0]
    for i in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
        r = row0 + i
        image, copy = r % n_src, r // n_src
        dm.fill_draws(draws, seed, image, copy, shift_q8, tan_q14, scale_q14, shear_q14,
                      elastic_q8, cuda.threadIdx.x, cuda.blockDim.x)
        cuda.syncthreads()
        for p in range(cuda.threadIdx.x, side * side, cuda.blockDim.x):
            out[i, p] = dm.pixel(src, image, side, draws, p // side, p % side)
        cuda.syncthreads()
