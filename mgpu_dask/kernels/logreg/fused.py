"""The int8 evaluation's forward product and softmax in one kernel (``fused.cu``).

Unfused, an evaluation writes the int32 sums of ``w8 @ v^T`` (term columns x
rows) from cuBLAS and reads them back in the softmax kernel.  ``fused.cu``
computes a block's 128 rows of sums with ``mma.sync`` (int8 in, exact int32
out) and keeps them in shared memory, where one thread per row takes the softmax
as :func:`.cuda_int8.softmax_xent_i8` does, operation for operation: the residual
terms and the block sums are that kernel's (the GPU tests compare them), so
everything after it is unchanged.  The forward product and the softmax read the rows
once, at one byte per value (the gradient's product reads their transposed copy).

It needs ``mma.sync`` and ``cp.async`` (compute capability 8.0 or newer), at most
:data:`~.cuda_int8.I8_LOCAL_K` classes and at most 64 term columns; :func:`usable`
says whether an evaluation qualifies, and cuBLAS and the softmax kernel run
otherwise.  Plain CUDA C compiled by NVRTC through CuPy once per GPU, process and
class count (CuPy keeps the binary in its cache folder).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..cuda_source import module

ROWS, THREADS = 128, 256  # as fused.cu has them
# Passed to fused.cu: bytes of a row per pipeline stage (whole 128-byte lines), the
# depth of the operand ring, and blocks per SM the registers must allow.
STAGE_BYTES, STAGES, MIN_BLOCKS = 128, 3, 3
MAX_WIDTH = 64
NEEDS = (8, 0)
SHARED_OPTIN = 99 << 10
"""Shared memory a block may opt in to on every GPU from compute capability 8.0 (as much
as consumer Ampere and Ada GPUs allow; data-centre GPUs allow more)."""


def shared_bytes(k: int, width: int) -> int:
    """A block's dynamic shared memory: the operand ring, which then holds the block's
    int32 sums and its k + 1 values per row."""
    ring = STAGES * (ROWS + width) * STAGE_BYTES
    sums = -(-ROWS * (width + 1) * 4 // 16) * 16
    return max(ring, sums + (k + 1) * ROWS * 8)


def usable(k: int, width: int, capability: tuple[int, int]) -> bool:
    """Whether an evaluation of ``k`` classes in ``width`` term columns runs fused on a
    GPU of ``capability``."""
    from .cuda_int8 import I8_LOCAL_K

    return (capability >= NEEDS and 2 <= k <= I8_LOCAL_K and width % 16 == 0
            and width <= MAX_WIDTH and shared_bytes(k, width) <= SHARED_OPTIN)


def options(k: int, width: int) -> tuple[str, ...]:
    """NVRTC's options for ``k`` classes in ``width`` term columns (a kernel per class
    count: its loops over the classes unrolled, a row's logits in registers)."""
    return ("--std=c++17", f"-DCLASSES={k}", f"-DWIDTH={width}",
            f"-DBK={STAGE_BYTES}", f"-DSTAGES={STAGES}", f"-DMIN_BLOCKS={MIN_BLOCKS}")


def _kernel(k: int, width: int) -> Any:
    return module(__package__, "fused.cu", options(k, width)).get_function("forward_softmax_i8")


def bound(v: Any, n: int, w8: Any, colinfo: Any, labels: Any, resid8: Any, bpart: Any,
          stream: Any) -> Callable[[], None]:
    """A no-argument callable: on ``stream``, the residual terms of rows ``v[:n]`` into
    ``resid8`` (term columns x rows) and each block's sums into ``bpart``, as cuBLAS's
    ``w8 @ v^T`` then ``softmax_xent_i8`` leave them.  Call it with the arrays' device
    current; they must stay allocated and in place."""
    width, k = int(w8.shape[0]), int(colinfo.shape[0]) // 2
    kernel = _kernel(k, width)
    shared = shared_bytes(k, width)
    kernel.max_dynamic_shared_size_bytes = max(shared, kernel.max_dynamic_shared_size_bytes)
    grid = (-(-n // ROWS),)
    args = (v, np.int32(v.shape[0]), np.int32(v.shape[1]), w8, colinfo, labels, np.int32(n),
            resid8, np.int64(resid8.shape[1]), bpart)

    def launch() -> None:
        with stream:
            kernel(grid, (THREADS,), args, shared_mem=shared)
    return launch
