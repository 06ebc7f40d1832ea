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
