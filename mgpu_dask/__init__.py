"""mgpu_dask: multi-GPU machine learning on Dask, checked side by side.

The public API: :class:`KNeighborsClassifier` and :class:`LogisticRegression`
(scikit-learn estimators on dask arrays of CuPy or NumPy chunks),
:func:`connect` (the one way to get a cluster and its client) and
:func:`load_dataset`.  They load on first use, and GPU libraries (CuPy,
numba-cuda, cuML, dask-cuda) only where they run, so ``import mgpu_dask`` works
on any machine and never creates a CUDA context.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import config  # noqa: F401  (loads the packaged defaults into dask.config)
from .exceptions import (BackendUnavailableError, ClusterError, CompileWarning, DataError,
                         MgpuDaskError)

if TYPE_CHECKING:
    from .cluster import connect
    from .data import load_dataset
    from .knn import KNeighborsClassifier
    from .logreg import LogisticRegression

__version__ = "0.1.0"

_LAZY = {"KNeighborsClassifier": "knn", "LogisticRegression": "logreg", "connect": "cluster",
         "load_dataset": "data"}
__all__ = ["BackendUnavailableError", "ClusterError", "CompileWarning", "DataError",
           "KNeighborsClassifier", "LogisticRegression", "MgpuDaskError", "__version__",
           "connect", "load_dataset"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
