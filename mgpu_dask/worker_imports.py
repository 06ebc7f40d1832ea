"""What the worker fork server imports once, so that every worker it forks starts warm.

A spawned Dask worker imports distributed, dask.array, CuPy, Numba's CUDA
target and our kernels before it runs a task: about 3 s in each new process on
an H200 machine, all on the critical path of a cold run.  The fork server
(:mod:`mgpu_dask.worker_start`) imports this module once; the workers it forks
inherit the loaded modules.

Nothing here initialises CUDA: a process that forks after ``cuInit`` gives
children that cannot use the GPU.  Numba's CUDA target loads its ~150 typing
and lowering registries on the first kernel compiled or loaded from the cache
(0.4 s in a new worker); building its contexts here does that work without
touching the driver.
"""

from __future__ import annotations

import contextlib
import importlib
import time

from mgpu_dask._compat import import_dask_array

MODULES = ("numpy", "distributed", "dask.array", "dask_cuda", "cupy", "numba", "numba.cuda",
           "mgpu_dask.knn_plans", "mgpu_dask.logreg_fit", "mgpu_dask.kernels.knn",
           "mgpu_dask.kernels.knn_cuda", "mgpu_dask.kernels.logreg_cuda")
"""Imported in this order; a missing optional library is skipped.  The estimators'
modules are not among them: the workers run ``knn_plans`` and ``logreg_fit``, which
import no scikit-learn (0.75-0.9 s on an H200 machine)."""

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
