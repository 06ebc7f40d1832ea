"""Errors a user can cause.

Every error here is printed by the CLI as one line (no traceback) and ends the
run with a non-zero exit status.  Anything else that escapes is our bug.
"""

from __future__ import annotations


class MgpuDaskError(Exception):
    """Base class: a problem the user can fix, described in one sentence."""


class DataError(MgpuDaskError, ValueError):
    """A data set is missing, corrupt, truncated or not what it claims to be."""


class DataTypeError(MgpuDaskError, TypeError):
    """Input of a type the estimators cannot take (sparse matrices, non-numeric objects)."""


class ClusterError(MgpuDaskError, RuntimeError):
    """A cluster could not be started, reached or sized as asked."""


class BackendUnavailableError(MgpuDaskError, ImportError):
    """An optional backend (CuPy, numba-cuda, cuML, dask-cuda) is not installed."""



class CompileWarning(UserWarning):
    """Our kernels are compiled for this kind of data now: their first use on this machine
    (seconds), later processes load them from the kernel caches."""
