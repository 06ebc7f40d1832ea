"""What becomes of candidate lists: two merged into one (shards of the training set),
and the vote of a query row's neighbours."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launch import array_module, launch, thread_grid
from .distances import _cuda_target


def merge(a: Any, b: Any, *, target: str | None = None) -> Any:
    """Merge two packed candidate sets for the same queries into the k best."""
    xp = array_module(a)
    out = xp.empty_like(a)
    if _cuda_target(a, target):
        from . import cuda as cuda_kernels

        launch(cuda_kernels.merge_pairs, *thread_grid(a.shape[0]), a, b, out)
    else:
        from . import cpu as cpu_kernels

        cpu_kernels.merge_pairs(a, b, out)
    return out


def vote(candidates: Any, n_classes: int, weights: str = "distance", *,
         target: str | None = None) -> tuple[Any, Any]:
    """Class probabilities ``(m, n_classes)`` and predictions ``(m,)`` from candidates."""
    if weights not in ("distance", "uniform"):
        raise ValueError(f"weights={weights!r} must be 'distance' or 'uniform'")
    xp = array_module(candidates)
    proba = xp.empty((candidates.shape[0], n_classes), dtype=np.float64)
    pred = xp.empty(candidates.shape[0], dtype=np.int32)
    uniform = weights == "uniform"
    if _cuda_target(candidates, target):
        from . import cuda as cuda_kernels

        launch(cuda_kernels.vote_rows, *thread_grid(candidates.shape[0]), candidates, n_classes, uniform,
                                                             proba, pred)
    else:
        from . import cpu as cpu_kernels

        cpu_kernels.vote_rows(candidates, n_classes, uniform, proba, pred)
    return proba, pred
