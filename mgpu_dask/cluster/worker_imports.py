"""What the worker fork server imports once, so that every worker it forks starts warm.

A spawned Dask worker imports distributed, dask.array, CuPy, Numba's CUDA
target and our kernels before it runs a task: seconds in each new process,
all on the critical path of a cold run.  The fork server
(:mod:`.worker_start`) imports this module once; the workers it forks inherit
the loaded modules.

Nothing here initialises CUDA: a process that forks after ``cuInit`` gives
children that cannot use the GPU.  Numba's CUDA target loads its typing and
lowering registries on the first kernel compiled or loaded from the cache;
building its contexts here does that work without touching the driver.
"""

from __future__ import annotations

import contextlib
import importlib
import time

from mgpu_dask.config.environment import import_dask_array

MODULES = ("numpy", "distributed", "dask.array", "dask_cuda", "cupy", "numba", "numba.cuda",
           "mgpu_dask.knn.plans", "mgpu_dask.logreg.leader", "mgpu_dask.knn.warmup",
           "mgpu_dask.logreg.warmup", "mgpu_dask.kernels.knn", "mgpu_dask.kernels.knn.cuda",
           "mgpu_dask.kernels.logreg.cuda", "mgpu_dask.kernels.logreg.cuda_int8")
"""Imported in this order; a missing optional library is skipped.  The estimators'
modules are not among them: the workers run :mod:`mgpu_dask.knn.plans` and
:mod:`mgpu_dask.logreg.leader`, which import no scikit-learn (most of a second)."""

loaded: list[str] = []
seconds: dict[str, float] = {}
"""Each module's import time here (those it brought first count towards it)."""
for _name in MODULES:
    _began = time.perf_counter()
    with contextlib.suppress(Exception):  # ImportError, or a GPU library without its driver
        if _name == "dask.array":
            import_dask_array()  # without xarray: the workers never use it
        importlib.import_module(_name)
        loaded.append(_name)
    seconds[_name] = time.perf_counter() - _began


def _numba_cuda_contexts() -> bool:
    """Build Numba's CUDA typing and target contexts (registries only, no driver call)."""
    if "cupy" not in loaded or "numba.cuda" not in loaded:
        return False  # no GPU stack: nothing a worker would compile for CUDA
    try:
        from numba.cuda.cudadrv.driver import driver
        from numba.cuda.descriptor import cuda_target
    except ImportError:  # Numba's own CUDA target (numba-cuda absent): left lazy
        return False
    if driver.is_initialized:
        return False
    cuda_target.typing_context.refresh()
    cuda_target.target_context.refresh()
    return True


with contextlib.suppress(Exception):
    _numba_cuda_contexts()

done_at = time.time()
"""When the imports ended (wall clock): the forked workers inherit it (cold-start probes)."""
