"""Where our GPU work allocates from, whatever the process's CuPy allocator is.

Importing cuDF (which dask-cuda's workers do where RAPIDS is installed) makes RMM
CuPy's allocator, and RMM's default resource takes every array from ``cudaMalloc``
and gives it back with ``cudaFree``, which waits for the whole GPU.  A KNN search
allocates and frees a few dozen arrays; each free then stalls the queue (what it
cost: docs/performance-history.md).

:func:`pooled` runs the work inside it on CuPy's own memory pool where the allocator
is RMM's over plain ``cudaMalloc`` (no pool, arena or ``cudaMallocAsync`` resource in
its chain), and changes nothing otherwise: a user who gave RMM a pool (dask-cuda's
``rmm_pool_size``) keeps it, and our arrays then share it with cuDF's.  The pool is
this thread's allocator inside the block only (``cupy.cuda.using_allocator``); an
array made there goes back to CuPy's pool when it is freed, wherever that is.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

POOLING = ("PoolMemoryResource", "ArenaMemoryResource", "CudaAsyncMemoryResource",
           "BinningMemoryResource", "FixedSizeMemoryResource", "CallbackMemoryResource")
"""RMM resources that keep freed memory (or let the driver keep it), or that we cannot see
into: under any of these, RMM's allocator is left as it is."""


def unpooled_rmm() -> bool:
    """Whether CuPy allocates through RMM with no pooling resource between it and
    ``cudaMalloc`` (adaptors that count or log allocations are looked through)."""
    cupy = sys.modules.get("cupy")
    rmm = sys.modules.get("rmm")
    if cupy is None or rmm is None:
        return False
    allocator = cupy.cuda.get_allocator()
    if not (getattr(allocator, "__module__", None) or "").startswith("rmm"):
        return False
    try:
        resource = rmm.mr.get_current_device_resource()
    except Exception:  # an RMM we do not know: leave it alone
        return False
    while resource is not None:
        if type(resource).__name__ in POOLING:
            return False
        resource = getattr(resource, "upstream_mr", None)
    return True


@contextlib.contextmanager
def pooled() -> Iterator[None]:
    """The block's CuPy allocations from CuPy's own pool where :func:`unpooled_rmm`; as
    they are otherwise.  Also a decorator (``@pooled()``)."""
    if not unpooled_rmm():
        yield
        return
    cupy: Any = sys.modules["cupy"]
    with cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc):
        yield
