"""Deformed copies of images, made where they will live: a CUDA kernel and its CPU twin.

Row ``r`` of a deformed set is copy ``r // n_src`` of source image
``r % n_src`` (copy 0 is the image itself), so contiguous row blocks hold
every source image and any block can be made on any worker from the source
images alone.  Both kernels evaluate :mod:`.arithmetic` in integers: the same
seed gives the same bytes on a CPU and on a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange

from ..launch import array_module, launch, on_gpu
from . import arithmetic as dm
from .params import Deformation


@njit(parallel=True, cache=True, nogil=True)
def deform_cpu(src, out, seed, row0, side, shift_q8, tan_q14, scale_q14, shear_q14, elastic_q8):
    n_src = src.shape[0]
    for i in prange(out.shape[0]):
        r = row0 + i
        image, copy = r % n_src, r // n_src
        draws = np.empty(dm.N_DRAWS, np.int64)
        dm.fill_draws(draws, seed, image, copy, shift_q8, tan_q14, scale_q14, shear_q14,
                      elastic_q8, 0, 1)
        for p in range(side * side):
            out[i, p] = dm.pixel(src, image, side, draws, p // side, p % side)


def deform_rows(src: Any, row0: int, n_rows: int, seed: int,
                deformation: Deformation = Deformation(), *, target: str | None = None) -> Any:
    """Rows ``row0 .. row0 + n_rows`` of the deformed set of ``src`` (uint8, same array module).

    Parameters
    ----------
    src : numpy.ndarray or cupy.ndarray of shape (n_src, side * side), uint8
        The source images, square.
    row0, n_rows : int
        The rows wanted (row ``r``: copy ``r // n_src`` of image ``r % n_src``).
    seed : int
        The deformation seed.
    deformation : Deformation
        Bounds of the random transforms.
    target : {None, "cuda", "cpu"}
        Kernel family; None follows the array type.
    """
    xp = array_module(src)
    side = int(round(math.sqrt(src.shape[1])))
    if side * side != src.shape[1] or side < 2:
        raise ValueError(f"deformation needs square images; rows of {src.shape[1]} pixels are not")
    if src.dtype != np.uint8:
        raise ValueError(f"deformation reads uint8 pixels, got {src.dtype}")
    out = xp.empty((n_rows, side * side), dtype=np.uint8)
    if n_rows == 0:
        return out
    args = (int(seed) & dm.M31, int(row0), side, *deformation.integer_args())
    cuda = target == "cuda" or (target is None and on_gpu(src))
    if cuda:
        from . import cuda as cuda_kernels

        blocks = min(n_rows, 65535 * 8)
        launch(cuda_kernels.deform_rows, blocks, 128, xp.ascontiguousarray(src), out, *args)
    else:
        deform_cpu(np.ascontiguousarray(src), out, *args)
    return out


def source_index(rows: Any, n_src: int) -> Any:
    """The source image of each deformed row."""
    return rows % n_src
