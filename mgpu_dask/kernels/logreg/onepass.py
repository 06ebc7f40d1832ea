"""The whole int8 evaluation in one pass over the rows (``onepass.cu``).

:mod:`.fused` takes the forward product and the softmax in one kernel, and the
gradient's product ``v^T R`` then reads the rows again, transposed (``vt``).
``onepass.cu`` keeps a tile of whole rows in shared memory while it takes the
forward product, the softmax (as :func:`.cuda_int8.softmax_xent_i8` does,
operation for operation) and the gradient's product from the same tile: each
row is read from memory once, and no transposed copy is needed.  A block walks
a run of tiles and keeps its gradient's int32 sums in registers; each block's
sums are added into one int64 array ``g64`` (atomic adds: integers, exact in any
order), which :func:`.cuda_int8.combine_i8_once` reads (and zeroes) as
:func:`.cuda_int8.combine_i8` reads the unfused blocks, and every 128 rows' k + 1
sums go to one row of ``bpart``, as unfused.
The integer sums are exact, so the loss and the gradients are the unfused
kernels' bits.

Its gradient sums take ``2 * NTG * 4`` registers per 32 features a warp owns,
so it serves up to :data:`MAX_CLASSES` classes and :data:`MAX_FEATURES`
features; its whole-row tiles need the shared memory of a data-centre GPU
(compute capability 8.0 or newer).  :func:`usable` says whether an evaluation
qualifies; :mod:`.fused` and cuBLAS run otherwise.

On a Hopper GPU (compute capability 9.0) the kernel is built for ``sm_90a`` with
the softmax on warps of its own (``-DSPECIALIZED``, :func:`specialized`): four
warps that hand most of their registers to eight warps holding the gradient's
sums (``setmaxnreg``), so that one tile's float64 softmax runs while the tensor
cores take the products of the next and the last.  Its arithmetic and every sum's
order are the other build's, so the bits are too.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..cuda_source import module

TILE, UNIT, THREADS = 64, 128, 256  # as onepass.cu has them
SPECIALIZED_THREADS = 384  # onepass.cu's BLOCK: four softmax warps and eight others
SPECIALIZE = True
"""Build the Hopper kernel with warps of their own for the softmax where the GPU is one."""
TERMS = 4
MAX_CLASSES = 10
MAX_FEATURES = 1024
MAX_ROWS_PER_BLOCK = 131072
"""A block's int32 gradient sums are exact up to this many rows (cuda_int8.I8_MAX_K)."""
NEEDS = (8, 0)


def ksteps(d_pad: int) -> int:
    """32-byte steps of a row of ``d_pad`` bytes."""
    return -(-d_pad // 32)


def shared_bytes(k: int, width: int, d_pad: int) -> int:
    """A block's dynamic shared memory: w8's rows in use, three row tiles, the forward's
    two halves of sums, two tiles' residual terms and two units' k + 1 values per row."""
    pitch = ksteps(d_pad) * 32 + 16
    ncol = TERMS * k
    wrows = -(-ncol // 8) * 8
    return (wrows * pitch + 3 * TILE * pitch + 2 * TILE * (ncol + 1) * 4
            + 2 * wrows * (TILE + 16) + 2 * (k + 1) * TILE * 8)


def usable(k: int, width: int, d_pad: int, capability: tuple[int, int],
           shared_optin: int) -> bool:
    """Whether an evaluation of ``k`` classes (``width`` term columns) over rows of
    ``d_pad`` bytes runs in one pass on a GPU of ``capability`` that lets a block have
    ``shared_optin`` bytes of shared memory."""
    return (capability >= NEEDS and 2 <= k <= MAX_CLASSES and d_pad <= MAX_FEATURES
            and width % 16 == 0 and width >= TERMS * k
            and shared_bytes(k, width, d_pad) <= shared_optin)


def specialized(capability: tuple[int, int]) -> bool:
    """Whether a GPU of ``capability`` runs the build with the softmax on warps of its own:
    a Hopper (9.0), whose ``setmaxnreg`` moves registers between the two kinds of warp."""
    return SPECIALIZE and tuple(capability) == (9, 0)


def options(k: int, width: int, d_pad: int,
            capability: tuple[int, int] = (8, 0)) -> tuple[str, ...]:
    """NVRTC's options: a kernel per class count and row length (its loops unrolled), and
    on a GPU of ``capability`` that :func:`specialized` takes, that build, for ``sm_90a``
    (CuPy adds its own ``-arch=sm_90`` after it; NVRTC keeps the ``a``)."""
    plain = ("--std=c++17", f"-DCLASSES={k}", f"-DWIDTH={width}", f"-DKSTEPS={ksteps(d_pad)}")
    return plain + ("-arch=sm_90a", "-DSPECIALIZED") if specialized(capability) else plain


def blocks(n: int, sms: int) -> tuple[int, int]:
    """``(blocks, units per block)`` for ``n`` rows on a GPU of ``sms`` SMs: a block per SM
    while each takes at most MAX_ROWS_PER_BLOCK rows, more blocks beyond."""
    units = max(1, -(-n // UNIT))
    per = min(-(-units // sms), MAX_ROWS_PER_BLOCK // UNIT)
    return -(-units // per), per


def shared_optin(device_id: int) -> int:
    """The shared memory a block may opt in to on GPU ``device_id``."""
    import cupy

    return int(cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id))


def capability(device_id: int) -> tuple[int, int]:
    """GPU ``device_id``'s compute capability."""
    import cupy

    cc = cupy.cuda.Device(device_id).compute_capability
    return int(cc[:-1]), int(cc[-1])


def _kernel(k: int, width: int, d_pad: int) -> tuple[Any, int]:
    """The kernel for the current device, and the threads of its block."""
    import cupy

    device = cupy.cuda.Device().id
    opts = options(k, width, d_pad, capability(device))
    threads = SPECIALIZED_THREADS if "-DSPECIALIZED" in opts else THREADS
    return module(__package__, "onepass.cu", opts).get_function("evaluate_i8"), threads


def bound(v: Any, n: int, w8: Any, colinfo: Any, labels: Any, g64: Any, bpart: Any,
          stream: Any) -> Callable[[], None]:
    """A no-argument callable: on ``stream``, the int32 gradient sums of rows ``v[:n]``
    added into ``g64`` (d_pad x width, int64; zeros before the first call, and
    :func:`.cuda_int8.combine_i8_once` zeroes it again) and each 128 rows' sums into
    ``bpart``, as the unfused kernels leave ``grad32``'s block sums and ``bpart``.  Call
    it with the arrays' device current; they must stay allocated and in place."""
    width, k = int(w8.shape[0]), int(colinfo.shape[0]) // 2
    d_pad = int(v.shape[1])
    if g64.shape != (d_pad, width) or g64.dtype != np.int64:
        raise ValueError(f"g64 must be int64 of shape {(d_pad, width)}, not {g64.dtype} {g64.shape}")
    kernel, threads = _kernel(k, width, d_pad)
    shared = shared_bytes(k, width, d_pad)
    kernel.max_dynamic_shared_size_bytes = max(shared, kernel.max_dynamic_shared_size_bytes)
    grid, per = blocks(n, multiprocessors(v.device.id))
    args = (v, np.int32(v.shape[0]), np.int32(d_pad), w8, colinfo, labels, np.int32(n),
            np.int32(per), np.int32(-(-n // UNIT)), g64, bpart)

    def launch() -> None:
        with stream:
            kernel((grid,), (threads,), args, shared_mem=shared)
    return launch


def multiprocessors(device_id: int) -> int:
    """The streaming multiprocessors of GPU ``device_id``."""
    import cupy

    return int(cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device_id))
