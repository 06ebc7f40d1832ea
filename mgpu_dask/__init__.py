"""mgpu_dask: multi-GPU machine learning on Dask, checked side by side.

GPU libraries (CuPy, numba-cuda, cuML, dask-cuda) are imported lazily, so
``import mgpu_dask`` works on any machine and never creates a CUDA context.
"""

from __future__ import annotations

from . import config  # noqa: F401  (loads the packaged defaults into dask.config)
from .exceptions import BackendUnavailableError, ClusterError, DataError, MgpuDaskError

__version__ = "0.1.0"

__all__ = ["BackendUnavailableError", "ClusterError", "DataError", "MgpuDaskError", "__version__"]
