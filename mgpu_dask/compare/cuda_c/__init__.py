"""The ``cuda-c`` comparison backend: our algorithms as CUDA C kernels (:mod:`.kernels`,
the ``.cu`` sources beside it) on our placement (:mod:`.backend`)."""

from __future__ import annotations

from .backend import knn, logreg

__all__ = ["knn", "logreg"]
