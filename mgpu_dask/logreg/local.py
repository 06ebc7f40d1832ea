"""Fits without a distributed client: CuPy rows on this process's GPU by the device
L-BFGS, any other rows by a small Dask graph per evaluation on the local scheduler."""

from __future__ import annotations

import functools
from typing import Any

import dask
import numpy as np

from ..exceptions import DataError
from ..kernels.allocator import pooled
from ..kernels.launch import beside
from ..kernels.logreg import ShardObjective
from ..kernels.precision import Precision
from ..parallel.inputs import all_finite, device_of
from .lbfgs.launches import compile_ahead
from .problem import NOT_FINITE, Problem, sum_parts
from .solvers import fit_on_device


@pooled()
def fit_here_on_device(X: Any, y: Any, problem: Problem,
                       weights: Any = None) -> dict[str, Any] | None:
    """The device L-BFGS in this process over dask ``X`` of CuPy blocks (``y``: their class
    indices; ``weights``: each row's weight, chunked as ``X``'s rows, or None); None where
    it does not apply (host rows, ``optimizer="host"``)."""
    if problem.optimizer == "host" or device_of(X) != "gpu":
        return None
    compile_ahead()  # a first fit's loop kernels, side by side while the rows come
    X_blocks = dask.compute(*X.to_delayed().ravel())
    if not all(all_finite(b) for b in X_blocks):
        raise DataError(NOT_FINITE)
    y_blocks = dask.compute(*y.to_delayed().ravel())
    w_blocks = dask.compute(*weights.to_delayed().ravel()) if weights is not None else None
    import cupy

    arrays = [(b, beside(yb, b)) if w_blocks is None else
              (b, beside(yb, b), beside(w_blocks[i], b, np.float32))
              for i, (b, yb) in enumerate(zip(X_blocks, y_blocks))]
    with cupy.cuda.Device(X_blocks[0].device.id):
        result = fit_on_device(arrays, problem)
    return {**result, "round_trips": 0, "comm": "graph"}


def _block_loss_grad(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray,
                     precision: Precision, scale: float | None, weights: Any = None) -> tuple:
    objective = ShardObjective(X, labels, len(intercept), precision, scale, weights=weights)
    return (*objective(coef, intercept), str(objective.precision), objective.fallback)


class GraphEvaluator:
    """Loss and gradient as one small graph per evaluation (no distributed client);
    ``weights``: each row's sample weight, chunked as ``X``'s rows."""

    def __init__(self, X: Any, y: Any, precision: Precision = Precision.FP32,
                 scale: float | None = None, weights: Any = None) -> None:
        self._block = functools.partial(_block_loss_grad, precision=precision, scale=scale)
        arrays = (X, y) if weights is None else (X, y, weights)
        self._keep = tuple(a.persist() for a in arrays)  # live while referenced
        self.pairs = list(zip(*(a.to_delayed().ravel() for a in self._keep)))
        self.calls = 0
        self.ran: dict[str, Any] = {}

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        self.calls += 1
        parts = dask.compute(*[dask.delayed(self._block)(xb, yb, coef, intercept,
                                                         weights=wb[0] if wb else None)
                               for xb, yb, *wb in self.pairs])
        notes = sorted({p[4] for p in parts if p[4]})
        self.ran = {"precision": ",".join(sorted({p[3] for p in parts})),
                    "precision_note": "; ".join(notes) or None}
        return sum_parts([p[:3] for p in parts])

    def products(self) -> dict[str, Any]:
        return self.ran

    def close(self) -> None:
        self.pairs = []
        self._keep = None
